"""The OCI layout writer: the same trees give the same digest, and what is written unpacks back.

Why this exists: the image's reproducibility (``lab/gatekeeper_lab/image/oci.py``) rests on layers
whose bytes depend only on the files; these tests change what must not matter (file
times, creation order, the folder's name) and what must (a byte, the epoch).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from gatekeeper_lab.image import oci

IMAGE = oci.Image(
    entrypoint=["/usr/local/bin/x"], cmd=["run"], env=["PATH=/usr/bin"], user="65532:65532",
    workdir="/", labels={"a": "b"}, epoch=1_700_000_000,
)  # fmt: skip


def tree(root: Path, names: list[str], content: bytes = b"hello") -> Path:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    (root / "usr/bin").mkdir(parents=True, exist_ok=True)
    (root / "usr/bin/link").symlink_to("../lib/a.txt")
    return root


def write(tmp: Path, src: Path, image: oci.Image = IMAGE) -> str:
    layer = oci.Layer(src, "test", owners={"home": (65532, 65532)})
    return oci.write_layout(tmp / "layout", {"amd64": [layer]}, image, "1.0").index


def test_file_times_order_and_folder_do_not_change_the_digest(tmp_path: Path) -> None:
    a = tree(tmp_path / "a", ["usr/lib/a.txt", "home/x", "etc/z"])
    first = write(tmp_path / "out-a", a)
    time.sleep(0.01)
    b = tree(tmp_path / "other-name", ["etc/z", "home/x", "usr/lib/a.txt"])
    os.utime(b / "etc/z", (1, 1))
    assert write(tmp_path / "out-b", b) == first


def test_a_changed_byte_or_epoch_changes_the_digest(tmp_path: Path) -> None:
    base = write(tmp_path / "1", tree(tmp_path / "a", ["usr/lib/a.txt"]))
    assert write(tmp_path / "2", tree(tmp_path / "b", ["usr/lib/a.txt"], b"hellp")) != base
    later = oci.Image(**{**IMAGE.__dict__, "epoch": IMAGE.epoch + 1})
    assert write(tmp_path / "3", tree(tmp_path / "c", ["usr/lib/a.txt"]), later) != base


def test_unpack_gives_back_the_files_and_the_config(tmp_path: Path) -> None:
    src = tree(tmp_path / "a", ["usr/lib/a.txt", "home/x"])
    (src / "usr/lib/a.txt").chmod(0o755)
    write(tmp_path, src)
    layout = tmp_path / "layout"
    oci.unpack(layout, "1.0", tmp_path / "rootfs")
    root = tmp_path / "rootfs"
    assert (root / "usr/lib/a.txt").read_bytes() == b"hello"
    assert (root / "usr/lib/a.txt").stat().st_mode & 0o777 == 0o755
    assert os.readlink(root / "usr/bin/link") == "../lib/a.txt"
    assert (root / "usr/lib/a.txt").stat().st_mtime == IMAGE.epoch
    config = oci.read_config(layout, "1.0")
    assert config["config"]["User"] == "65532:65532"
    assert config["created"] == "2023-11-14T22:13:20Z"
    index = json.loads((layout / "index.json").read_text())
    assert index["manifests"][0]["annotations"][oci.REF_NAME] == "1.0"
    assert index["manifests"][0]["mediaType"] == oci.INDEX, "the tag names an image index"


def test_each_architecture_is_an_image_of_one_index_by_its_platform(tmp_path: Path) -> None:
    """One tag, one index; a runtime picks the manifest of its platform; a layer the
    architectures share is stored once."""
    shared = oci.Layer(tree(tmp_path / "app", ["app/main.py"]), "app")
    x86 = oci.Layer(tree(tmp_path / "x86", ["lib/x86_64-linux-gnu/libc.so"]), "base amd64")
    arm = oci.Layer(tree(tmp_path / "arm", ["lib/aarch64-linux-gnu/libc.so"]), "base arm64")
    layout = tmp_path / "layout"
    written = oci.write_layout(layout, {"amd64": [x86, shared], "arm64": [arm, shared]}, IMAGE, "1.0")
    index = oci.read_index(layout, "1.0")
    assert [m["platform"] for m in index["manifests"]] == [
        {"architecture": "amd64", "os": "linux"},
        {"architecture": "arm64", "os": "linux", "variant": "v8"},
    ]
    assert written.manifests == {m["platform"]["architecture"]: m["digest"] for m in index["manifests"]}
    assert oci.manifest_digest(layout, "1.0", "arm64") == written.manifests["arm64"]
    assert oci.read_config(layout, "1.0", "arm64")["architecture"] == "arm64"
    assert oci.read_config(layout, "1.0", "amd64")["architecture"] == "amd64"
    oci.unpack(layout, "1.0", tmp_path / "arm-root", "arm64")
    assert (tmp_path / "arm-root/lib/aarch64-linux-gnu/libc.so").is_file()
    assert not (tmp_path / "arm-root/lib/x86_64-linux-gnu").exists()
    layers = {
        arch: json.loads((layout / "blobs/sha256" / d.split(":")[1]).read_text())["layers"]
        for arch, d in written.manifests.items()
    }
    assert layers["amd64"][1] == layers["arm64"][1] and layers["amd64"][0] != layers["arm64"][0]
    with pytest.raises(ValueError, match="no s390x image"):
        oci.manifest_digest(layout, "1.0", "s390x")


def test_a_blob_that_does_not_match_its_digest_is_refused(tmp_path: Path) -> None:
    write(tmp_path, tree(tmp_path / "a", ["usr/lib/a.txt"]))
    layout = tmp_path / "layout"
    blobs = sorted((layout / "blobs/sha256").iterdir(), key=lambda p: p.stat().st_size)
    blobs[-1].write_bytes(blobs[-1].read_bytes() + b"x")  # the largest blob: the layer
    with pytest.raises(ValueError, match="does not match its digest"):
        oci.unpack(layout, "1.0", tmp_path / "rootfs")
