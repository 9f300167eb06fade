"""The docs: the site builds with `mkdocs build --strict`, and its generated reference holds every config key,
every flag of every command, every exit code and every field of every on-disk format. The keys and flags are
found here by walking the schema and the parser anew, not by asking the generator (docs/hooks.py) what it
wrote. Plus the limits the README and the results page keep to, and their links."""

from __future__ import annotations

import argparse
import html
import importlib.util
import re
import sys
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[1]


def _load_hooks():
    spec = importlib.util.spec_from_file_location("interlingua_docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


hooks = _load_hooks()


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built as `make docs` builds it, into a temporary folder; a warning fails the build."""
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    out = tmp_path_factory.mktemp("site")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("NO_MKDOCS_2_WARNING", "1")
        config = load_config(str(ROOT / "mkdocs.yml"), site_dir=str(out), strict=True)
        build(config)  # mkdocs.exceptions.Abort on any warning in strict mode (a broken link, a missing page)
    return out


def _page(site: Path, name: str) -> str:
    return (site / name / "index.html").read_text()


def _codes(page_html: str) -> set[str]:
    """The text of every inline code span of a page."""
    return {
        html.unescape(re.sub(r"<[^>]+>", "", c)).strip()
        for c in re.findall(r"<code>(.*?)</code>", page_html, re.DOTALL)
    }


def _models_in(annotation: typing.Any) -> list[tuple[type, bool]]:
    """(model class, inside a list) for each pydantic model a field's type holds."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(annotation, False)]
    inside_list = typing.get_origin(annotation) is list
    return [(cls, listed or inside_list) for arg in typing.get_args(annotation) for cls, listed in _models_in(arg)]


def schema_keys(cls: type[BaseModel], prefix: str = "") -> list[str]:
    """Every field path of the config schema: sections, keys, and a list's items as `key[].field`."""
    keys = []
    for name, info in cls.model_fields.items():
        key = f"{prefix}.{name}" if prefix else name
        keys.append(key)
        for model, listed in _models_in(info.annotation):
            keys += schema_keys(model, key + "[]" if listed else key)
    return keys


def commands() -> dict[str, argparse.ArgumentParser]:
    """'' -> the main parser, then each command's."""
    from orchestration.cli import parser

    main = parser()
    sub = next(a for a in main._actions if isinstance(a, argparse._SubParsersAction))
    return {"": main, **sub.choices}


def _names(action: argparse.Action) -> list[str]:
    return list(action.option_strings) or [action.metavar or action.dest]


def test_the_site_builds_strict_with_every_config_key_in_the_reference(site):
    from orchestration.config import Config

    keys = schema_keys(Config)
    assert len(keys) > 150 and "prepare.sources[].lang_map" in keys and "mine.gold.split" in keys
    missing = [key for key in keys if key not in _codes(_page(site, "reference/configuration"))]
    assert not missing, f"config keys missing from the built reference: {missing}"


def test_every_flag_of_every_command_is_in_its_section_of_the_built_reference(site):
    page = _page(site, "reference/cli")
    missing = []
    for name, p in commands().items():
        start = page.index('id="global-flags"' if not name else f'id="interlingua-{name}"')
        section = page[start : page.find("<h2", start + 1)]
        found = _codes(section)
        missing += [
            f"{name or 'interlingua'} {flag}"
            for action in p._actions
            if not isinstance(action, argparse._SubParsersAction)
            for flag in _names(action)
            if flag not in found
        ]
    assert len(commands()) > 10
    assert not missing, f"flags missing from the built reference: {missing}"


def test_every_exit_code_is_in_the_built_reference(site):
    from core.errors import Exit

    found = _codes(_page(site, "reference/cli"))
    assert not [member.name for member in Exit if member.name not in found]
    assert hooks.command_exit_codes("run", commands()["run"]) == sorted(int(m) for m in Exit)
    assert 3 not in hooks.command_exit_codes("train", commands()["train"])


def test_every_field_of_every_on_disk_format_is_in_the_built_reference(site):
    found = _codes(_page(site, "reference/formats"))
    missing = [
        f"{model}.{field}" for model, fields in hooks.format_fields().items() for field in fields if field not in found
    ]
    assert not missing, f"format fields missing from the built reference: {missing}"


def test_the_results_and_the_changelog_are_pages_of_the_site(site):
    results = _page(site, "results")
    assert "At a glance" in results and (site / "results" / "scaling-16cores.png").is_file()
    assert "2026-11-" in _page(site, "changelog")


def test_every_config_key_and_flag_has_a_one_line_description():
    assert not hooks.undescribed_config_keys() and not hooks.undescribed_flags()


def test_the_readme_is_a_short_guide_whose_test_command_ci_runs():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    assert "make test   #" in readme  # the quickstart's test command...
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert "make test" in ci and "make docs" in ci  # ...is what CI runs, then the docs site


def test_the_results_page_holds_the_current_figures_only():
    assert len((ROOT / "benchmarks" / "RESULTS.md").read_text().splitlines()) <= 300
    testing = (ROOT / "docs" / "testing.md").read_text()
    assert not re.search(r"^\|.*\bmin\b.*\d\d s", testing, re.MULTILINE), "docs/testing.md keeps no table of past runs"


@pytest.mark.parametrize("name", ["README.md", "CHANGELOG.md", "benchmarks/RESULTS.md"])
def test_the_links_of_the_pages_outside_the_site_reach_their_files(name):
    """mkdocs checks the site's links; these pages are read on GitHub (their links to the docs folder, too)."""
    page = ROOT / name
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)", page.read_text())
    assert targets
    broken = [t for t in targets if "://" not in t and not (page.parent / t).exists()]
    assert not broken, f"{name}: links to missing files {broken}"
