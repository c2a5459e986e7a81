"""``lws-gatekeeper image build|lock`` and ``plugin build``: the image's and the kubectl
plugin's builds, in a development install.

Why this exists: building the image is a development tool, not part of the product; the
main command finds this group through the entry point ``lws_gatekeeper.commands``
(``gatekeeper.cli``), so ``run`` never loads it. ``./scripts/image`` calls it.
"""

from __future__ import annotations

from pathlib import Path

import click

from gatekeeper_lab.image import build as image_builder

__all__ = ["image", "plugin"]


def say(msg: str) -> None:
    click.echo(msg, err=True)


@click.group()
def image() -> None:
    """The project's container image: an OCI layout built from pinned Debian packages and wheels."""


@image.command("build")
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Folder for the layout and SBOM.")
@click.option("--fresh", is_flag=True, help="Build again even when the cache has this image.")
def image_build(out: Path | None, fresh: bool) -> None:
    """Build the image of this source tree (cached by its inputs) and print where it is."""
    source = Path(__file__).resolve().parents[3]
    if not (source / "pyproject.toml").is_file():
        raise click.ClickException(f"{source} is not a source tree of the project: build from a clone")
    try:
        built = image_builder.build(source, say=say, fresh=fresh, out=out)
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"image      oci:{built.layout}:{built.tag}")
    click.echo(f"digest     {built.digest} (the image index)")
    for arch, digest in built.manifests.items():
        click.echo(f"{arch:<10} {digest} ({built.unpacked_size(arch) / 1e6:.1f} MB unpacked)")
    click.echo(f"size       {built.size / 1e6:.1f} MB compressed, every architecture")
    click.echo(f"sbom       {built.sbom}")
    click.echo(f"seconds    {built.seconds:.1f}{' (cached)' if built.cached else ''}")


@image.command("lock")
@click.option(
    "--keep-versions",
    is_flag=True,
    help="Keep the Python requirements at the versions pinned now; pin their wheels for every architecture.",
)
def image_lock(keep_versions: bool) -> None:
    """Pin the Debian packages and wheels the registries serve now (debian.lock, requirements.lock)."""
    image_builder.lock(Path(__file__).resolve().parents[3], say=say, keep_versions=keep_versions)


@click.group()
def plugin() -> None:
    """The kubectl plugin as one file per architecture (a PEX), and its krew manifest."""


@plugin.command("build")
@click.option("--out", type=click.Path(path_type=Path), default=Path("build/plugin"), show_default=True)
@click.option("--base-url", required=True, help="Where the archives will be served (the manifest's uris).")
@click.option("--homepage", required=True, help="The project's page, for the manifest.")
@click.option("--arch", "arches", multiple=True, type=click.Choice(["amd64", "arm64"]), help="Default: both.")
def plugin_build(out: Path, base_url: str, homepage: str, arches: tuple[str, ...]) -> None:
    """Build the plugin of this source tree from the image's pinned wheels; print the files."""
    from gatekeeper_lab.image.plugin import build_plugin

    source = Path(__file__).resolve().parents[3]
    archives, manifest = build_plugin(
        source, out, base_url=base_url, homepage=homepage, arches=arches or ("amd64", "arm64"), say=say
    )
    for a in archives:
        click.echo(f"{a.arch:<6} {a.path} sha256:{a.sha256}")
    click.echo(f"krew   {manifest}")
