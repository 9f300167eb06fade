"""Fresh virtualenvs for the install tests, filled from wheels already on this machine.

`wheelhouse(wheel, extra)` is a folder of every wheel that the project's `wheel[extra]` and torch need, built
once per machine by `pip wheel` (which resolves them from the package index, as a user's install does) and
kept in the user's cache folder, keyed by the pins that install (the core's and the extra's in setup.cfg). Later
runs install from it with `--no-index`: no download, the same versions.
"""

from __future__ import annotations

import configparser
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.procs import PACKAGE_ROOT

TORCH = "torch==2.13.0"  # the Makefile's: installed first, so that pip never picks a CUDA build
PIP_TIMEOUT_S = 900  # a first fill resolves from the package index


def cache_root() -> Path:
    """This user's cache folder for the tests' wheels (INTERLINGUA_TEST_CACHE, else ~/.cache/interlingua-tests:
    not XDG_CACHE_HOME, which the suite points at a folder of its own for the product), mode 0700."""
    root = Path(os.environ.get("INTERLINGUA_TEST_CACHE") or Path.home() / ".cache" / "interlingua-tests")
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    if root.stat().st_uid != os.geteuid():
        raise RuntimeError(f"{root} belongs to another user: refusing to install wheels from it")
    return root


def pip(python: Path | str, *args: str) -> None:
    out = subprocess.run(
        [str(python), "-m", "pip", *args, "--quiet", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT_S,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]


def requirements(extra: str) -> list[str]:
    """The requirement lines of setup.cfg that `wheel[extra]` installs: the core's and the extra's."""
    setup = configparser.ConfigParser()
    setup.read(PACKAGE_ROOT / "setup.cfg")
    lines = setup["options"]["install_requires"].splitlines() + setup["options.extras_require"][extra].splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


def wheelhouse(wheel: Path, extra: str) -> Path:
    """The folder of wheels that installs torch and `wheel[extra]` without an index (the project's own
    wheel left out: it changes with the code)."""
    pins = hashlib.sha256("\n".join(requirements(extra)).encode() + extra.encode()).hexdigest()[:16]
    house = cache_root() / f"wheelhouse-{extra}-{pins}"
    if not (house / ".complete").is_file():
        partial = house.with_name(house.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        pip(sys.executable, "wheel", "-w", str(partial), TORCH, f"{wheel}[{extra}]")
        for own in partial.glob("interlingua-*.whl"):
            own.unlink()
        (partial / ".complete").touch()
        shutil.rmtree(house, ignore_errors=True)
        partial.rename(house)
    return house


def venv_with(folder: Path, wheel: Path, extra: str) -> Path:
    """A fresh virtualenv at `folder` holding torch and `wheel[extra]`, nothing else, installed from
    `wheelhouse` with no index; its path."""
    house = wheelhouse(wheel, extra)
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, timeout=300)
    python = folder / "bin" / "python"
    # no byte-compiling of every installed file (torch alone: 20 s against 6): `in_venv_env` lets the modules a
    # test imports be compiled once, when first imported
    pip(python, "install", "--no-compile", "--no-index", "--find-links", str(house), TORCH)
    pip(python, "install", "--no-compile", "--no-index", "--find-links", str(house), f"{wheel}[{extra}]")
    return folder


def in_venv_env() -> dict[str, str]:
    """The environment for a command of a fresh venv: not this checkout's (PYTHONPATH, VIRTUAL_ENV), and
    writing the byte code of what it imports (the venv was installed without it)."""
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")
    return {k: v for k, v in os.environ.items() if k not in drop}
