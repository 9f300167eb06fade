"""What a registered model carries: the project as a wheel inside the MLflow model, and the pinned
requirements beside it; `log_model` logs `orchestration/embedding/pyfunc.py` with both
(`registry.log_pyfunc_model`)."""

from __future__ import annotations

import os
from pathlib import Path

DISTRIBUTION = "interlingua"  # setup.cfg's name
BUILD_FILES = ("pyproject.toml", "setup.cfg", "setup.py", "MANIFEST.in", "README.md", "LICENSE")

# Wheels this process built, by the sources' hash, in a folder only it writes (mode 0700, removed at exit): a
# process that registers several models (a test run, a loop of `run`s) builds each version of the code once.
_BUILT: dict[str, Path] = {}
_BUILT_DIR: list[Path] = []


def log_model(uri: str, run_id: str, model_dir: str | os.PathLike, embedding_dim: int):
    """Log the model directory as the project's pyfunc model (`embedding.pyfunc`) in `run_id`, with a wheel of
    the project and the third-party distributions the pyfunc imports (`pyfunc.REQUIREMENTS`) pinned to the
    versions installed here; returns mlflow's ModelInfo."""
    import tempfile

    from orchestration.adapters import registry
    from orchestration.embedding import pyfunc

    with tempfile.TemporaryDirectory(prefix="interlingua-wheel-") as tmp:
        wheel = build_project_wheel(tmp)  # before the run is entered: a failed build leaves its status alone
        return registry.log_pyfunc_model(
            uri,
            run_id,
            model_dir,
            embedding_dim,
            code=pyfunc.__file__,
            wheel=wheel,
            requirements=pinned(pyfunc.REQUIREMENTS),
        )


def build_project_wheel(dst: str | os.PathLike) -> Path:
    """A wheel of the installed project, built from its source tree (found from the package's location)
    into `dst`; returns its path. Raises FileNotFoundError without a source tree (a non-editable install),
    RuntimeError when the build fails.

    The build runs on a copy of the build files and the packages, so the checkout gets no build/ folder
    and no stale file of an earlier build can slip into the wheel. The version gets a local label made of
    the sources' hash (`0.1.0+src1a2b3c4d5e6f`): MLflow names the environments it restores after the
    requirement strings, and a wheel named as an earlier one would reuse an environment with old code.
    The same sources are built once per process (`_BUILT`); each call gets its own copy in `dst`.
    """
    import hashlib
    import importlib.metadata
    import shutil

    import orchestration

    root = Path(orchestration.__file__).resolve().parents[1]
    if not (root / "setup.cfg").is_file():
        raise FileNotFoundError(
            f"{root} holds no setup.cfg: a registered model carries a wheel of the project, built from its "
            "source tree; install the project from a checkout (`pip install -e .`) to register models"
        )
    top_level = importlib.metadata.distribution(DISTRIBUTION).read_text("top_level.txt")
    if top_level is None:  # an install by a tool that writes no top_level.txt: which packages to build is unknown
        raise FileNotFoundError(
            f"the installed {DISTRIBUTION} has no top_level.txt; install the project from a checkout "
            "(`pip install -e .`) to register models"
        )
    packages = top_level.split()
    tree, out = Path(dst) / "src", Path(dst) / "dist"
    tree.mkdir(parents=True)
    for name in BUILD_FILES:
        if (root / name).is_file():
            shutil.copy2(root / name, tree / name)
    for name in packages:
        shutil.copytree(root / name, tree / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    digest = hashlib.sha256()
    for path in sorted(p for p in tree.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(tree)).encode() + b"\0" + path.read_bytes())
    with open(tree / "setup.cfg", "a") as cfg:  # the copy's: the checkout keeps its version
        cfg.write(f"\n[egg_info]\ntag_build = +src{digest.hexdigest()[:12]}\n")
    built = _BUILT.get(digest.hexdigest())
    if built is None or not built.is_file():
        built = _build(tree, root)
        _BUILT[digest.hexdigest()] = built
    out.mkdir(parents=True)
    return Path(shutil.copy2(built, out / built.name))


def _build(tree: Path, root: Path) -> Path:
    """`pip wheel` of the prepared source `tree` into this process's own wheel folder; returns the wheel."""
    import atexit
    import shutil
    import subprocess
    import sys
    import tempfile

    if not _BUILT_DIR:
        _BUILT_DIR.append(Path(tempfile.mkdtemp(prefix="interlingua-wheels-")))
        atexit.register(shutil.rmtree, _BUILT_DIR[0], True)
    out = Path(tempfile.mkdtemp(dir=_BUILT_DIR[0]))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            "-q",
            "-w",
            str(out),
            str(tree),
        ],
        capture_output=True,
        text=True,
    )
    wheels = sorted(out.glob("*.whl"))
    if done.returncode != 0 or len(wheels) != 1:
        raise RuntimeError(f"building the project's wheel from {root} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return wheels[0]


def pinned(distributions) -> list[str]:
    """`name==version` of each installed distribution, without a local label (`torch==2.13.0`, not
    `2.13.0+cpu`: the same release from any index matches it)."""
    import importlib.metadata

    return [f"{name}=={importlib.metadata.version(name).split('+')[0]}" for name in distributions]
