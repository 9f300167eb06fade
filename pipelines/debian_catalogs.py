"""`interlingua get-catalogs`: the localization catalogs (gettext MO files) of a pinned list of Debian packages,
for `kind: gettext` sources (configs/multidomain-cpu.yaml).

    OUT/                                  (default data/catalogs)
        <locale>/LC_MESSAGES/<name>.mo    as /usr/share/locale lays them out
        catalogs.json                     format marker; each package's name, version and the sha256 of its
                                          .deb; each catalog's sha256; the locales asked for

The packages are fetched with `apt-get download` (no root needed; `--apt-update` refreshes the package lists
first, which needs root) and unpacked with `dpkg-deb` in a scratch folder. OUT is an output of the
`CatalogsKind` (`core.output`): built in a staging folder beside it and swapped in whole, so a failed fetch
leaves the previous catalogs as they were. An existing OUT is replaced only when it holds nothing but an
earlier fetch's files (its manifest names them); anything else there, or a link, is refused before any work.
Each catalog carries its package's licence (/usr/share/doc/<package>/copyright): fetched when needed, never
committed.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from core import ownership, stage
from core.boundary import Name, Segment
from core.dataset import file_sha256
from core.errors import UserError
from core.location import Location
from core.output import OutputFolder, Staging

log = logging.getLogger(__name__)

FORMAT: Final = "interlingua-catalogs"  # the marker that makes a folder ours to replace
VERSION = 1
MANIFEST = "catalogs.json"
DEFAULT_DIR = "data/catalogs"

# Desktop, office-like, media and developer tools of Debian 12, chosen for their many and long messages. gtk30 and
# glib20 (libgtk-3-common, libglib2.0-data) hold the test sets of configs/catalogs-*.yaml, which
# configs/multidomain-cpu.yaml leaves out of training.
PACKAGES: Final = (
    "nautilus-data", "gedit-common", "evince-common", "gnome-control-center-data", "libgtk-3-common",
    "libglib2.0-data", "xfce4-session", "thunar-data", "gnome-text-editor", "gimp-data",
    "git", "gcc-12-locales",
    "evolution-common", "evolution-data-server-common", "gnucash-common", "gnumeric-common", "pidgin-data",
    "inkscape", "vlc-l10n", "anjuta-common", "geany-common", "brasero-common", "rhythmbox-data", "shotwell-common",
    "totem-common", "cheese-common", "eog", "epiphany-browser-data", "file-roller", "gnome-disk-utility",
    "gnome-shell-common", "gnome-software-common", "gnome-system-monitor", "gnome-terminal-data", "gthumb-data",
    "mousepad", "remmina-common", "seahorse", "simple-scan", "xfce4-panel", "xfce4-settings",
)  # fmt: skip
LOCALE_DIR = "usr/share/locale"


class CatalogsError(UserError, ValueError):
    """A package that could not be fetched or unpacked; the message names it and what to do."""


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Package(_Record):
    """A package fetched: its catalogs are what it shipped in this version."""

    name: Segment
    version: str
    sha256: str  # of the .deb as downloaded


class CatalogsManifest(_Record):
    """`catalogs.json`: what makes the folder ours to replace, and what was fetched."""

    format: Literal["interlingua-catalogs"] = FORMAT
    version: int = VERSION
    locales: list[Segment] | None  # None: every locale the packages ship
    packages: list[Package]
    files: dict[Name, str]  # <locale>/LC_MESSAGES/<name>.mo -> sha256


def read_manifest(out_dir: Location) -> CatalogsManifest | None:
    """The folder's manifest; None when it holds none, or one that is not a catalogs fetch's."""
    try:
        return CatalogsManifest.model_validate_json(out_dir.join(MANIFEST).read_bytes())
    except (FileNotFoundError, ValidationError):
        return None


class CatalogsKind:
    """Fetched catalogs as an output kind (`core.output.Kind`): the files its manifest names, and the manifest,
    written last."""

    what = "get-catalogs OUT"
    marker = MANIFEST
    advice = "give an empty or new folder; interlingua get-catalogs replaces only its own catalogs"

    def ours(self, folder: Location) -> Callable[[str], bool]:
        manifest = read_manifest(folder)
        own = ownership.with_parents([MANIFEST, *manifest.files]) if manifest else set()
        return lambda entry: entry in own


@dataclass(frozen=True)
class Fetched:
    """What `fetch` wrote."""

    out_dir: Path
    packages: int
    catalogs: int
    locales: int
    skipped_links: int  # catalogs a package ships as a link to another file: not copied


def apt_download(packages: Sequence[str], dest: Path) -> None:
    """`apt-get download` each package's .deb into `dest`; the packages it could not find are missing there."""
    done = subprocess.run(
        ["apt-get", "download", "-qq", *packages], cwd=dest, capture_output=True, text=True, check=False
    )
    for line in done.stderr.splitlines():
        if "couldn't be accessed by user '_apt'" not in line:  # apt's note when run as root: not a fault
            log.warning("apt-get: %s", line)


def apt_update() -> None:
    """`apt-get update` (root): the package lists `apt_download` finds the packages in."""
    done = subprocess.run(["apt-get", "update", "-qq"], capture_output=True, text=True, check=False)
    if done.returncode:
        raise CatalogsError(f"apt-get update failed ({done.stderr.strip() or done.returncode}); it needs root")


def _deb_field(deb: Path, field: str) -> str:
    return subprocess.run(
        ["dpkg-deb", "-f", str(deb), field], capture_output=True, text=True, check=True
    ).stdout.strip()


def _unpack(debs: Iterable[Path], root: Path) -> list[Package]:
    """Each .deb unpacked into `root` (dpkg-deb), as a `Package`."""
    packages = []
    for deb in debs:
        try:
            name, version = _deb_field(deb, "Package"), _deb_field(deb, "Version")
            subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], capture_output=True, text=True, check=True)
        except subprocess.CalledProcessError as exc:
            raise CatalogsError(
                f"{deb.name}: not a Debian package dpkg-deb can unpack ({exc.stderr.strip()})"
            ) from None
        packages.append(Package(name=name, version=version, sha256=file_sha256(str(deb))))
    return packages


def fetch(
    out_dir: str | Path = DEFAULT_DIR,
    *,
    packages: Sequence[str] | None = None,
    locales: Sequence[str] | None = None,
    update: bool = False,
    download: Callable[[Sequence[str], Path], None] | None = None,
) -> Fetched:
    """Fetch `packages` (default `PACKAGES`) and keep their catalogs of `locales` (None: all) in `out_dir`,
    replacing an earlier fetch there (see the module's docstring). CatalogsError naming the packages not
    fetched; ForeignDataError when `out_dir` holds anything an earlier fetch did not write; BoundaryError for a
    link in it. `download(packages, folder)` puts the .deb files in `folder` (default: `apt_download`)."""
    out = Path(out_dir).absolute()
    packages = list(PACKAGES if packages is None else packages)
    wanted = set(locales) if locales is not None else None

    def work(staging: Staging) -> stage.Manifest[Fetched]:
        with tempfile.TemporaryDirectory(prefix="interlingua-debs-") as scratch:
            debs, root = Path(scratch, "debs"), Path(scratch, "root")
            debs.mkdir()
            if update:
                apt_update()
            log.info("get-catalogs: downloading %d packages", len(packages))
            (download or apt_download)(packages, debs)
            fetched = _unpack(sorted(debs.glob("*.deb")), root)
            missing = sorted(set(packages) - {p.name for p in fetched})
            if missing:
                raise CatalogsError(
                    f"not downloaded: {', '.join(missing)}; refresh the package lists (--apt-update, as root) "
                    "or check the names"
                )
            files, links = _copy_catalogs(root / LOCALE_DIR, staging.local, wanted)
        manifest = CatalogsManifest(
            locales=sorted(wanted) if wanted is not None else None,
            packages=sorted(fetched, key=lambda p: p.name),
            files=files,
        )
        text = json.dumps(manifest.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n"
        found_locales = len({name.split("/")[0] for name in files})
        result = Fetched(out, len(fetched), len(files), found_locales, links)
        return stage.Manifest(result, text.encode("utf-8"))  # committed last

    folder = OutputFolder(out, CatalogsKind())
    fetched = stage.run(stage.always(folder), work).manifest
    if fetched.skipped_links:
        log.info("get-catalogs: %d catalogs shipped as links to others, not copied", fetched.skipped_links)
    if wanted is not None and fetched.locales < len(wanted):
        log.warning(
            "get-catalogs: no catalog of %d of the %d locales asked for", len(wanted) - fetched.locales, len(wanted)
        )
    return fetched


def _copy_catalogs(locale_dir: Path, staging: Path, wanted: set[str] | None) -> tuple[dict[str, str], int]:
    """Copy `<locale>/LC_MESSAGES/*.mo` of the unpacked packages into the staging folder: name -> sha256, and the
    number of catalogs that were links (not copied)."""
    files: dict[str, str] = {}
    links = 0
    for mo in sorted(locale_dir.glob("*/LC_MESSAGES/*.mo")):
        locale = mo.parent.parent.name
        if wanted is not None and locale not in wanted:
            continue
        if any(p.is_symlink() for p in (mo, mo.parent, mo.parent.parent)) or not mo.is_file():
            links += 1
            continue
        name = f"{locale}/LC_MESSAGES/{mo.name}"
        target = staging / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(mo, target)
        files[name] = file_sha256(str(target))
    return files, links
