"""`interlingua get-catalogs` (`pipelines.debian_catalogs`): Debian packages built here with dpkg-deb stand in for
apt-get's downloads. The catalogs land as /usr/share/locale lays them out with a manifest naming each one; an
earlier fetch is replaced whole; a folder holding anything else, or a link, is refused before any download, with
every sentinel file (put at each level of the tree) and every catalog left as it was."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import polib
import pytest

from core.boundary import BoundaryError
from core.dataset import file_sha256
from core.ownership import ForeignDataError
from orchestration.cli import main
from pipelines import debian_catalogs
from pipelines.debian_catalogs import CatalogsError, fetch

SENTINEL = b"a user's file: never delete or overwrite me\n"
MESSAGES = {"fr": "Ouvrir le fichier", "en": "Open the file", "sr@latin": "Otvori datoteku"}


def _mo(path: Path, text: str) -> None:
    catalog = polib.POFile()
    catalog.metadata = {"Content-Type": "text/plain; charset=UTF-8"}
    catalog.append(polib.POEntry(msgid="Open the file", msgstr=text))
    path.parent.mkdir(parents=True, exist_ok=True)
    catalog.save_as_mofile(str(path))


def _deb(folder: Path, name: str, version: str, catalogs: dict[str, str], links: dict[str, str] | None = None) -> Path:
    """A Debian package `name` shipping usr/share/locale/<locale>/LC_MESSAGES/<name>.mo for each locale of
    `catalogs` (its message), and `links`: locale -> the locale whose catalog it links to."""
    root = folder / f"{name}-root"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: t <t@example.org>\nDescription: t\n"
    )
    for locale, text in catalogs.items():
        _mo(root / "usr/share/locale" / locale / "LC_MESSAGES" / f"{name}.mo", text)
    for locale, to in (links or {}).items():
        link = root / "usr/share/locale" / locale / "LC_MESSAGES" / f"{name}.mo"
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(f"../../{to}/LC_MESSAGES/{name}.mo")
    deb = folder / f"{name}_{version}_all.deb"
    subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(root), str(deb)], check=True, capture_output=True)
    return deb


class Mirror:
    """apt-get download's stand-in: copies the .deb of each package it has; records each call."""

    def __init__(self, debs: dict[str, Path]):
        self.debs, self.calls = debs, []

    def __call__(self, packages: Sequence[str], dest: Path) -> None:
        self.calls.append(list(packages))
        for name in packages:
            if name in self.debs:
                (dest / self.debs[name].name).write_bytes(self.debs[name].read_bytes())


@pytest.fixture(scope="module")
def mirror(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("debs")
    return {
        "gedit-common": _deb(folder, "gedit-common", "44.2-1", MESSAGES),
        "eog": _deb(folder, "eog", "43.2-1", {"fr": "Ouvrir une image"}, links={"fr_FR": "fr"}),
    }


def _tree(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_catalogs_land_as_the_locale_tree_with_a_manifest_naming_each(tmp_path, mirror):
    out = tmp_path / "catalogs"
    fetched = fetch(out, packages=["gedit-common", "eog"], download=Mirror(mirror))
    manifest = json.loads((out / "catalogs.json").read_text())
    names = {"fr/LC_MESSAGES/gedit-common.mo", "en/LC_MESSAGES/gedit-common.mo", "sr@latin/LC_MESSAGES/gedit-common.mo"}
    assert set(manifest["files"]) == names | {"fr/LC_MESSAGES/eog.mo"}
    assert set(_tree(out)) == set(manifest["files"]) | {"catalogs.json"}  # the link was not copied
    assert (fetched.catalogs, fetched.locales, fetched.packages, fetched.skipped_links) == (4, 3, 2, 1)
    for name, sha in manifest["files"].items():
        assert file_sha256(out / name) == sha
    assert polib.mofile(str(out / "sr@latin/LC_MESSAGES/gedit-common.mo"))[0].msgstr == "Otvori datoteku"
    assert manifest["packages"] == [
        {"name": "eog", "version": "43.2-1", "sha256": file_sha256(mirror["eog"])},
        {"name": "gedit-common", "version": "44.2-1", "sha256": file_sha256(mirror["gedit-common"])},
    ]
    assert manifest["locales"] is None and manifest["format"] == "interlingua-catalogs"
    assert not list(tmp_path.glob(".catalogs.partial*"))  # the staging folder was swapped in


def test_locales_keep_only_those_asked_for(tmp_path, mirror):
    out = tmp_path / "catalogs"
    fetched = fetch(out, packages=["gedit-common"], locales=["fr", " sr@latin"], download=Mirror(mirror))
    assert set(_tree(out)) == {
        "catalogs.json",
        "fr/LC_MESSAGES/gedit-common.mo",
        "sr@latin/LC_MESSAGES/gedit-common.mo",
    }
    assert json.loads((out / "catalogs.json").read_text())["locales"] == ["fr", "sr@latin"]
    assert fetched.locales == 2


@pytest.mark.parametrize(
    ("locales", "error"),
    [
        (["fr", "fr_FR"], "no package ships a catalog of fr_FR"),  # a typo: the earlier catalogs are not lost
        ([" ", ""], "names no locale"),
        (["../etc"], "not a relative path inside its folder"),
    ],
)
def test_locales_that_match_nothing_are_refused_and_the_earlier_fetch_stays(tmp_path, mirror, locales, error):
    out = tmp_path / "catalogs"
    fetch(out, packages=["gedit-common"], download=Mirror(mirror))
    before = _tree(out)
    with pytest.raises((CatalogsError, BoundaryError), match=error):
        fetch(out, packages=["gedit-common"], locales=locales, download=Mirror(mirror))
    assert _tree(out) == before and not list(tmp_path.glob(".catalogs.partial*"))


def test_a_fetch_replaces_the_earlier_one_whole(tmp_path, mirror):
    out = tmp_path / "catalogs"
    fetch(out, packages=["gedit-common", "eog"], download=Mirror(mirror))
    fetch(out, packages=["eog"], download=Mirror(mirror))  # gedit-common's catalogs are no longer asked for
    assert set(_tree(out)) == {"catalogs.json", "fr/LC_MESSAGES/eog.mo"}
    assert not (out / "en").exists() and not (out / "sr@latin").exists()  # its folders went with them


# a user's file at each level of the catalogs' tree, and the entry the refusal names (the topmost foreign one)
SENTINELS = [
    ("notes.txt", "notes.txt"),
    ("fr/notes.txt", "fr/notes.txt"),
    ("fr/LC_MESSAGES/mine.mo", "fr/LC_MESSAGES/mine.mo"),
    ("de/LC_MESSAGES/x.mo", "de"),
]


@pytest.mark.parametrize(("where", "named"), SENTINELS)
def test_a_folder_holding_a_users_file_is_refused_before_any_download(tmp_path, mirror, where, named):
    out = tmp_path / "catalogs"
    fetch(out, packages=["gedit-common"], download=Mirror(mirror))
    sentinel = out / where
    sentinel.parent.mkdir(parents=True, exist_ok=True)
    sentinel.write_bytes(SENTINEL)
    before = _tree(out)
    apt = Mirror(mirror)
    with pytest.raises(ForeignDataError, match=rf"did not write \({named}\)"):
        fetch(out, packages=["eog"], download=apt)
    assert apt.calls == [] and _tree(out) == before and sentinel.read_bytes() == SENTINEL


def test_a_folder_of_an_older_fetch_without_its_manifest_is_refused(tmp_path, mirror):
    out = tmp_path / "catalogs"  # what scripts/get_catalogs.sh wrote: packages.tsv and the catalogs
    (out / "fr" / "LC_MESSAGES").mkdir(parents=True)
    (out / "fr" / "LC_MESSAGES" / "eog.mo").write_bytes(SENTINEL)
    (out / "packages.tsv").write_bytes(SENTINEL)
    apt = Mirror(mirror)
    with pytest.raises(ForeignDataError, match="give an empty or new folder"):
        fetch(out, packages=["eog"], download=apt)
    assert apt.calls == [] and _tree(out) == {"fr/LC_MESSAGES/eog.mo": SENTINEL, "packages.tsv": SENTINEL}


def test_a_link_in_the_folder_is_refused_and_nothing_is_written_through_it(tmp_path, mirror):
    out, outside = tmp_path / "catalogs", tmp_path / "outside"
    fetch(out, packages=["eog"], download=Mirror(mirror))
    outside.mkdir()
    (outside / "keep").write_bytes(SENTINEL)
    (out / "en").symlink_to(outside)  # gedit-common ships en/LC_MESSAGES/...: it would land outside
    apt = Mirror(mirror)
    with pytest.raises(BoundaryError, match="symbolic links"):
        fetch(out, packages=["gedit-common"], download=apt)
    assert apt.calls == [] and _tree(outside) == {"keep": SENTINEL}
    assert (out / "fr/LC_MESSAGES/eog.mo").exists()


def test_a_package_not_downloaded_is_named_and_the_earlier_fetch_stays(tmp_path, mirror):
    out = tmp_path / "catalogs"
    fetch(out, packages=["eog"], download=Mirror(mirror))
    before = _tree(out)
    with pytest.raises(CatalogsError, match="not downloaded: no-such-package; check the names"):
        fetch(out, packages=["eog", "no-such-package"], download=Mirror(mirror))
    assert _tree(out) == before and not list(tmp_path.glob(".catalogs.partial*"))


def test_the_command_prints_what_it_fetched_and_refuses_a_users_folder(tmp_path, mirror, monkeypatch, capsys):
    monkeypatch.setattr(debian_catalogs, "PACKAGES", ("gedit-common",))
    monkeypatch.setattr(debian_catalogs, "apt_download", Mirror(mirror))
    out = tmp_path / "catalogs"
    assert main(["get-catalogs", "-o", str(out), "--locales", "en,fr"]) == 0
    assert "2 catalogs in 2 locales of 1 packages in" in capsys.readouterr().out
    (out / "notes.txt").write_bytes(SENTINEL)
    assert main(["get-catalogs", "-o", str(out)]) == 2
    assert "holds what interlingua did not write (notes.txt)" in capsys.readouterr().err
    assert (out / "notes.txt").read_bytes() == SENTINEL


def test_a_uri_is_refused_before_anything_is_written(tmp_path, mirror, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CatalogsError, match="written to a local folder"):
        fetch("s3://bucket/catalogs", packages=["eog"], download=Mirror(mirror))
    assert list(tmp_path.iterdir()) == []


def _on_path(tmp_path: Path, monkeypatch, script: str | None) -> None:
    """PATH holding only dpkg-deb and, unless None, an `apt-get` running `script`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dpkg-deb").symlink_to(shutil.which("dpkg-deb"))
    if script is not None:
        (bin_dir / "apt-get").write_text("#!/bin/sh\n" + script)
        (bin_dir / "apt-get").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))


def test_apt_s_own_error_is_quoted_and_nothing_is_written(tmp_path, monkeypatch):
    _on_path(tmp_path, monkeypatch, "echo 'E: Unable to locate package no-such-package' >&2\nexit 100\n")
    out = tmp_path / "catalogs"
    with pytest.raises(CatalogsError, match="apt-get download failed: E: Unable to locate package no-such-package"):
        fetch(out, packages=["no-such-package"])
    assert not out.exists() and not list(tmp_path.glob(".catalogs.partial*"))


def test_a_machine_without_apt_get_is_told_so(tmp_path, monkeypatch):
    _on_path(tmp_path, monkeypatch, None)
    with pytest.raises(CatalogsError, match="needs apt-get"):
        fetch(tmp_path / "catalogs", packages=["eog"])
