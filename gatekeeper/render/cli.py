"""``lws-gatekeeper render POOLS.yaml``: the reserved pools as objects for one backend.

Why this exists: the click command is kept beside the render logic so that the program's
main module only registers it (``main.add_command(render_cmd, "render")``). Without
``-o`` the objects go to standard output, ready for ``| kubectl apply -f -``; with
``-o DIR`` each pool's objects go to ``DIR/<backend>-<pool>.yaml``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gatekeeper.core.backends import BACKENDS
from gatekeeper.render.manifests import TemplatesMissing, render, render_stream
from gatekeeper.render.pools import PoolsError, parse_pools

__all__ = ["render_cmd"]


@click.command("render")
@click.argument("pools_file", metavar="POOLS.yaml", type=click.Path(dir_okay=False, allow_dash=True))
@click.option(
    "--backend",
    type=click.Choice(BACKENDS.names),
    default=BACKENDS.default.name,
    show_default=True,
    help="; ".join(f"{b.name}: {b.renders}" for b in BACKENDS) + ".",
)
@click.option(
    "-o",
    "--output-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write DIR/<backend>-<pool>.yaml per pool instead of printing one stream.",
)
def render_cmd(pools_file: str, backend: str, output_dir: Path | None) -> None:
    """Render the reserved pools described in POOLS.yaml ('-': standard input) for a backend.

    \b
    POOLS.yaml:
      pools:
        - name: on-demand              # names the objects; LWSs opt in with
                                       # lws-gatekeeper.io/pool=on-demand
          nodeLabels: {pool: on-demand}
          gpus: 4                      # quota of gpuResource
          gpuResource: nvidia.com/gpu  # optional, this is the default
          cpu: 64                      # optional quota of cpu and of memory
          memory: 512Gi                # (Kubernetes quantities)
          namespaces: [team-a, team-b] # who may use it
          queueingStrategy: BestEffortFIFO  # optional, or StrictFIFO
          admissionChecks: [node-fit]  # optional, kueue only: AdmissionChecks
                                       # the ClusterQueue requires

    \b
    Without cpu/memory only the GPUs are limited, and most backends' objects
    list no cpu/memory quota; a Kueue ClusterQueue, which must cover every
    resource the pods ask, gets cpu 100M and memory 100Pi (more than any pool
    has). Backends other than kueue ignore admissionChecks (a comment says so).
    """
    if pools_file == "-":
        source, text = "<stdin>", sys.stdin.read()
    else:
        path = Path(pools_file)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise click.ClickException(f"cannot read {pools_file}: {exc.strerror or exc}") from exc
        source = pools_file
    try:
        pools = parse_pools(text, source)
        if output_dir is None:
            click.echo(render_stream(pools, backend), nl=False)
            return
        rendered = render(pools, backend)
    except (PoolsError, TemplatesMissing) as exc:
        raise click.ClickException(str(exc)) from exc
    output_dir.mkdir(parents=True, exist_ok=True)
    for r in rendered:
        target = output_dir / r.file_name
        target.write_text(r.text, encoding="utf-8")
        click.echo(f"wrote {target}", err=True)
