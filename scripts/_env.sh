# Sourced by the other scripts: a virtualenv with the project, its lab (lab/: the sandbox,
# the image builder, the demos) and its dev tools, re-installed only when a pyproject.toml
# changes. Fails loudly on missing tools.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

need() { command -v "$1" >/dev/null 2>&1 || { echo "error: '$1' is needed: $2" >&2; exit 2; }; }
need go "the sandbox builds Kubernetes from Go modules (Go 1.26 or newer)"
PY=${PYTHON:-python3}
need "$PY" "Python 3.11 or newer"
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "error: Python 3.11+ needed" >&2; exit 2; }

stamp=.venv/.installed-$(cat pyproject.toml lab/pyproject.toml | sha256sum | cut -c1-12)
if [ ! -f "$stamp" ]; then
  echo "setting up .venv (Python dependencies)" >&2
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  log=$(mktemp)
  { .venv/bin/python -m pip install --upgrade pip &&
    .venv/bin/python -m pip install -e '.[dev]' -e ./lab; } >"$log" 2>&1 ||
    { tail -30 "$log" >&2; echo "error: pip install failed (log: $log)" >&2; exit 2; }
  rm -f .venv/.installed-*
  touch "$stamp"
fi
export PATH="$ROOT/.venv/bin:$PATH"
