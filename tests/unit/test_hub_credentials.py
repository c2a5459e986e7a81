"""``controller.hub_link.credentials_of``: a member's hub credentials change when any file of them does.

A member follows its hub credentials (``HubLink._follow_credentials``) by this digest: a
rotated certificate or key, a new token file, or a rewritten kubeconfig must each change it,
and a file that cannot be read (being replaced) must not stop it.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from gatekeeper.controller.hub_link import credentials_of


def _kubeconfig(folder: Path, user: dict[str, str]) -> Path:
    cfg = {
        "clusters": [
            {"name": "hub", "cluster": {"server": "https://127.0.0.1:1", "certificate-authority": "ca.crt"}}
        ],
        "users": [{"name": "member", "user": user}],
        "contexts": [{"name": "hub", "context": {"cluster": "hub", "user": "member"}}],
        "current-context": "hub",
    }
    path = folder / "kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_the_digest_changes_with_every_file_the_kubeconfig_names(tmp_path: Path) -> None:
    for name in ("ca.crt", "member.crt", "member.key", "token"):
        (tmp_path / name).write_text(name)
    path = _kubeconfig(tmp_path, {"client-certificate": "member.crt", "client-key": "member.key"})
    digest = credentials_of(str(path))
    first = digest()
    assert digest() == first  # nothing changed
    seen = {first}
    for name in ("member.crt", "member.key", "ca.crt"):
        (tmp_path / name).write_text(f"{name} rotated")
        assert digest() not in seen, name
        seen.add(digest())
    _kubeconfig(tmp_path, {"tokenFile": "token"})
    assert digest() not in seen
    seen.add(digest())
    (tmp_path / "token").write_text("a new token")
    assert digest() not in seen
    seen.add(digest())
    (tmp_path / "token").unlink()  # being replaced: unreadable, yet a digest
    assert digest() not in seen
    path.write_text(": not yaml :")
    assert isinstance(digest(), str)
