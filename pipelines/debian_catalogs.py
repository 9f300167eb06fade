"""`interlingua get-catalogs`: the localization catalogs (gettext MO files) of a pinned list of Debian packages,
for `kind: gettext` sources (configs/multidomain-cpu.yaml).

    OUT/                                  (default data/catalogs)
        <locale>/LC_MESSAGES/<name>.mo    as /usr/share/locale lays them out
        catalogs.json                     format marker; each package's name, version and the sha256 of its
                                          .deb; each catalog's sha256; the locales asked for

The packages are fetched with `apt-get download` into a scratch folder (no root needed; `--apt-update`
refreshes the package lists first, which needs root); only their regular files under usr/share/locale/ are
read out of them (`dpkg-deb --fsys-tarfile`), straight into the staging folder. OUT is an output of the
`CatalogsKind` (`core.output`): built in a staging folder beside it and swapped in whole, so a failed fetch
leaves the previous catalogs as they were. An existing OUT is replaced only when it holds nothing but an
earlier fetch's files (its manifest names them); anything else there, or a link, is refused before any work.
Each catalog carries its package's licence (/usr/share/doc/<package>/copyright): fetched when needed, never
committed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from pydantic import ValidationError

from core import boundary, ownership, stage
from core.boundary import Name, Segment
from core.dataset import file_sha256
from core.errors import UserError
from core.location import Location
from core.output import OutputFolder, Staging
from core.schema import Record

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
    # the other desktops' and their applications' catalogs (MATE, Cinnamon, KDE, LXDE, more of GNOME and Xfce)
    "cinnamon-l10n", "mate-desktop-common", "caja-common", "pluma-common", "atril-common", "dolphin", "konsole",
    "okular", "kdenlive-data", "digikam-data", "xfce4-terminal", "ristretto", "parole", "xfce4-power-manager-data",
    "xfdesktop4-data", "xfwm4", "pcmanfm", "lxterminal", "gnome-calendar", "gnome-maps", "geary", "gnome-builder",
    "baobab", "gnome-calculator", "gnome-clocks", "gnome-weather", "gnome-contacts", "gnome-music", "gnome-photos",
    "gnome-boxes", "polari", "dconf-editor", "gucharmap", "yelp", "gnome-tweaks", "network-manager-gnome",
    "blueman", "pavucontrol", "audacity-data", "darktable", "synaptic", "filezilla-common", "claws-mail-i18n",
    "hexchat-common",
)  # fmt: skip
_CATALOG = re.compile(r"(?:\./)?usr/share/locale/([^/]+)/LC_MESSAGES/([^/]+\.mo)")  # a package's member


class CatalogsError(UserError, ValueError):
    """A package that could not be fetched or unpacked; the message names it and what to do."""


class Package(Record):
    """A package fetched: its catalogs are what it shipped in this version."""

    name: Segment
    version: str
    sha256: str  # of the .deb as downloaded


class CatalogsManifest(Record):
    """`catalogs.json`: what makes the folder ours to replace, and what was fetched."""

    format: Literal["interlingua-catalogs"] = FORMAT
    version: int = VERSION
    locales: list[Segment] | None  # None: every locale the packages ship
    packages: list[Package]
    files: dict[Name, str]  # <locale>/LC_MESSAGES/<name>.mo -> sha256


def read_manifest(out_dir: Location) -> CatalogsManifest | None:
    """The folder's manifest; None when it holds none, or one that is not a catalogs fetch's. BoundaryError when
    the folder holds a link (`core.boundary`): nothing is read through one."""
    boundary.check_no_links(out_dir, "the catalogs folder")
    try:
        return CatalogsManifest.model_validate_json(out_dir.join(MANIFEST).read_bytes())
    except (FileNotFoundError, ValidationError):
        return None


class CatalogsKind:
    """Fetched catalogs as an output kind (`core.output.Kind`): the files its manifest names, and the manifest,
    written last."""

    what = "-o"
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
    skipped_links: int  # catalogs a package ships as a link to another one: not copied


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise CatalogsError(f"get-catalogs needs {name} (Debian's or Ubuntu's apt and dpkg), which is not on PATH")
    return found


def apt_download(packages: Sequence[str], dest: Path) -> None:
    """`apt-get download` each package's .deb into `dest`. CatalogsError quoting apt's errors when it fails (a
    name it does not know makes it fetch none)."""
    done = subprocess.run(
        [_tool("apt-get"), "download", "-qq", *packages], cwd=dest, capture_output=True, text=True, check=False
    )
    lines = [line for line in done.stderr.splitlines() if "couldn't be accessed by user '_apt'" not in line]
    if done.returncode:  # apt's own notes when run as root are not faults
        errors = [line for line in lines if line.startswith("E:")] or lines[-3:] or [f"exit {done.returncode}"]
        raise CatalogsError(
            f"apt-get download failed: {'; '.join(errors)}; refresh the package lists (--apt-update, as root), "
            "check the names, or the network"
        )
    for line in lines:
        log.warning("apt-get: %s", line)


def apt_update() -> None:
    """`apt-get update` (root): the package lists `apt_download` finds the packages in."""
    done = subprocess.run([_tool("apt-get"), "update", "-qq"], capture_output=True, text=True, check=False)
    if done.returncode:
        raise CatalogsError(f"apt-get update failed ({done.stderr.strip() or done.returncode}); it needs root")


def check_locales(locales: Sequence[str] | None) -> set[str] | None:
    """The locales as a set (None: all); CatalogsError for an empty list or a name that is not one folder."""
    if locales is None:
        return None
    names = {name.strip() for name in locales if name.strip()}
    if not names:
        raise CatalogsError("--locales names no locale: give them comma-separated (en,fr,zh_CN), or leave it out")
    for name in names:
        boundary.check_segment(name, "--locales")
    return names


class _Catalogs:
    """The catalogs read out of the packages into the staging folder: name -> sha256, the links skipped."""

    def __init__(self, staging: Path, wanted: set[str] | None):
        self.staging, self.wanted = staging, wanted
        self.files: dict[str, str] = {}
        self.owner: dict[str, str] = {}  # name -> the package it came from
        self.links = 0

    def read(self, deb: Path) -> Package:
        """The package's catalogs of the wanted locales, written into the staging folder; the package."""
        dpkg = _tool("dpkg-deb")
        try:
            fields = [dpkg, "--show", "--showformat=${Package}\t${Version}", str(deb)]
            shown = subprocess.run(fields, capture_output=True, text=True, check=True).stdout
            name, _, version = shown.partition("\t")
            package = Package(name=name.strip(), version=version.strip(), sha256=file_sha256(deb))
            with subprocess.Popen([dpkg, "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE) as proc:
                assert proc.stdout is not None
                with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
                    for member in tar:
                        self._member(tar, member, package.name)
            if proc.returncode:
                raise subprocess.CalledProcessError(proc.returncode, "dpkg-deb --fsys-tarfile", stderr="")
        except (subprocess.CalledProcessError, tarfile.TarError) as exc:
            why = getattr(exc, "stderr", "") or str(exc)
            raise CatalogsError(f"{deb.name}: not a Debian package dpkg-deb can read ({why.strip()})") from None
        return package

    def _member(self, tar: tarfile.TarFile, member: tarfile.TarInfo, package: str) -> None:
        found = _CATALOG.fullmatch(member.name)
        if found is None or (self.wanted is not None and found[1] not in self.wanted):
            return
        if not member.isfile():  # a link to another catalog, or something else: nothing is written through it
            self.links += 1
            return
        name = boundary.check_name(f"{found[1]}/LC_MESSAGES/{found[2]}", package)
        if name in self.files:
            raise CatalogsError(f"{name} is shipped by both {self.owner[name]} and {package}: leave one out")
        stream = tar.extractfile(member)
        assert stream is not None
        data = stream.read()
        target = self.staging / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        self.files[name], self.owner[name] = hashlib.sha256(data).hexdigest(), package  # not read back


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
    fetched or the locales none of them ships (the earlier fetch stays); ForeignDataError when `out_dir` holds
    anything an earlier fetch did not write; BoundaryError for a link in it. `download(packages, folder)` puts
    the .deb files in `folder` (default: `apt_download`)."""
    out = Location.of(str(out_dir), "-o").require_local(
        CatalogsError, f"-o {out_dir}: the catalogs are written to a local folder (prepare reads them there)"
    )
    packages = list(PACKAGES if packages is None else packages)
    wanted = check_locales(locales)

    def work(staging: Staging) -> stage.Manifest[Fetched]:
        catalogs = _Catalogs(staging.local, wanted)
        with tempfile.TemporaryDirectory(prefix="interlingua-debs-") as scratch:
            if update:
                apt_update()
            log.info("get-catalogs: downloading %d packages", len(packages))
            (download or apt_download)(packages, Path(scratch))
            fetched = [catalogs.read(deb) for deb in sorted(Path(scratch).glob("*.deb"))]
        missing = sorted(set(packages) - {p.name for p in fetched})
        if missing:
            raise CatalogsError(f"not downloaded: {', '.join(missing)}; check the names, or --apt-update (as root)")
        found = {name.split("/")[0] for name in catalogs.files}
        if wanted is not None and wanted - found:
            raise CatalogsError(
                f"--locales: no package ships a catalog of {', '.join(sorted(wanted - found))}; the locales "
                "are /usr/share/locale's folder names (zh_CN, pt_BR, sr@latin)"
            )
        manifest = CatalogsManifest(
            locales=sorted(wanted) if wanted is not None else None,
            packages=sorted(fetched, key=lambda p: p.name),
            files=catalogs.files,
        )
        text = json.dumps(manifest.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n"
        result = Fetched(out, len(fetched), len(catalogs.files), len(found), catalogs.links)
        return stage.Manifest(result, text.encode("utf-8"))  # committed last

    fetched = stage.run(stage.always(OutputFolder(out, CatalogsKind())), work).manifest
    if fetched.skipped_links:
        log.info("get-catalogs: %d catalogs shipped as links to others, not copied", fetched.skipped_links)
    return fetched
