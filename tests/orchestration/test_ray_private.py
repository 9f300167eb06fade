"""Ray's private attributes are used in one adapter (orchestration/adapters/ray_private.py) and nowhere else in
the product; each one it relies on exists in the installed Ray, so an upgrade that removes one fails here,
naming it, instead of losing what the hook stood in for without a word."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRIVATE = re.compile(r"ray\._private|serve\._private|_register_sigint_handler|_create_default_callbacks|\._color\b")


def test_every_private_attribute_the_adapter_relies_on_exists_in_the_installed_ray():
    from orchestration.adapters.ray_private import hooks

    missing = [f"{getattr(owner, '__name__', owner)}.{name}" for owner, name in hooks() if not hasattr(owner, name)]
    assert not missing, f"this Ray lacks {missing}: decide again what each hook of ray_private.py stands in for"


def test_no_product_module_but_the_adapter_touches_rays_private_attributes():
    files = subprocess.run(
        ["git", "ls-files", "core", "pipelines", "model", "orchestration", "evaluation"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    found = [
        f"{name}:{i}"
        for name in files
        if name.endswith(".py") and name != "orchestration/adapters/ray_private.py"
        for i, line in enumerate((ROOT / name).read_text().splitlines(), 1)
        if PRIVATE.search(line) and not line.lstrip().startswith("#")
    ]
    assert not found, found
