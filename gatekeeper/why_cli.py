"""``why`` on the command line: ``lws-gatekeeper why`` and the kubectl plugin's only command.

Why this exists: the user's side of ``why.py``: its options as kubectl takes them
(``--kubeconfig``, ``--context``, ``-n``, ``-o text|yaml|json``), the exit code a script
reads (``WHY_RUNNING``, ``WHY_WAITING``, ``WHY_ERROR``) and one sentence, never a
traceback, when the answer cannot be read. ``cli.py`` adds it to ``lws-gatekeeper`` and to
the plugin (``cli.plugin``).
"""

from __future__ import annotations

import json
import sys

import click
import yaml

from gatekeeper import why

__all__ = ["WHY_ERROR", "WHY_RUNNING", "WHY_WAITING", "why_cmd"]


def say(msg: str) -> None:
    click.echo(msg, err=True)


WHY_RUNNING, WHY_WAITING, WHY_ERROR = 0, 1, 2
"""``why``'s exit codes: every group admitted (or, for a pool, none waiting); some group
waits; the answer could not be read (not found, not allowed, no API server)."""


@click.command("why")
@click.argument("target")
@click.option(
    "-n",
    "--namespace",
    default=None,
    help="The LWS's namespace (default: the context's); for a pool, where to read the groups "
    "when you may not read every namespace's.",
)
@click.option(
    "-o", "--output", type=click.Choice(["text", "yaml", "json"]), default="text", show_default=True
)
@click.option("--kubeconfig", default=None, help="Kubeconfig file (default: $KUBECONFIG or ~/.kube/config).")
@click.option("--context", default=None, help="The kubeconfig context to use (default: its current one).")
def why_cmd(
    target: str, namespace: str | None, output: str, kubeconfig: str | None, context: str | None
) -> None:
    """Why an LWS or a pool waits: TARGET is lws/NAME (or just NAME) or pool/NAME.

    For an LWS: each group's state and the gatekeeper's reason, the pool's usage and who
    holds it, and what must free up for its next group. For a pool: its usage, the groups
    that hold it and those that wait, in the order they are served. Reads only, with your
    own rights: what they do not let it read (a tenant's: the Pool, other namespaces) is
    left out and said. Exit code: 0 every group admitted (a pool: none waits), 1 some
    group waits, 2 the answer could not be read.
    Also installed as the kubectl plugin ``kubectl lws-gatekeeper why``.
    """
    import asyncio

    kind, _, name = target.rpartition("/")
    kind = kind.lower() or "lws"
    if kind not in ("lws", "leaderworkerset", "leaderworkersets", "pool", "pools") or not name:
        raise click.UsageError(f"TARGET is lws/NAME, NAME or pool/NAME, not {target!r}")
    try:
        result = asyncio.run(_why(kind, name, namespace, kubeconfig, context))
    except Exception as exc:  # a user's tool: a sentence and an exit code, never a traceback
        say(f"error: {_why_error(exc)}")
        sys.exit(WHY_ERROR)
    _print_why(result, output)
    sys.exit(WHY_WAITING if result.waiting else WHY_RUNNING)


async def _why(
    kind: str, name: str, namespace: str | None, kubeconfig: str | None, context: str | None
) -> why.LwsAnswer | why.PoolView:
    api = await why.client(kubeconfig, context)
    if kind.startswith("pool"):
        return await why.why_pool(api, name, namespace or why.default_namespace(api))
    return await why.why_lws(api, namespace or why.default_namespace(api), name)


def _why_error(exc: Exception) -> str:
    """What went wrong, for the user: the API server's refusal names the permission."""
    import httpx
    import kr8s

    if isinstance(exc, why.Forbidden):
        return f"not allowed: {exc}"
    if isinstance(exc, why.NotFound):
        return str(exc)
    if isinstance(exc, kr8s.ServerError):
        return f"the API server answered {exc}"
    if isinstance(exc, httpx.TransportError | OSError | kr8s.APITimeoutError):
        return f"cannot reach the API server: {exc or type(exc).__name__}"
    if isinstance(exc, ValueError) and "credentials" in str(exc):  # kr8s found no kubeconfig to use
        return f"no kubeconfig to use (--kubeconfig, $KUBECONFIG or ~/.kube/config): {exc}"
    return f"{type(exc).__name__}: {exc}"


def _print_why(result: why.LwsAnswer | why.PoolView, output: str) -> None:
    from gatekeeper.core.plugin.explain import lines_for_lws, lines_for_pool

    if output != "text":
        data = json.dumps(why.as_json(result), indent=2)
        click.echo(data if output == "json" else yaml.safe_dump(json.loads(data), sort_keys=False))
        return
    kinds = why.pool_kinds()
    if isinstance(result, why.LwsAnswer):
        lines = lines_for_lws(result, kinds=kinds)
    else:
        lines = lines_for_pool(result, kinds=kinds)
    lines.extend(f"not shown: {what}" for what in result.not_shown)
    click.echo("\n".join(lines))
