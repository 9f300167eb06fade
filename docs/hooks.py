"""The docs site's generated pages, written at every `mkdocs build` (mkdocs.yml, `hooks:`).

    reference/cli.md            every command, flag and exit code, from the parser (`orchestration.cli.parser`)
    reference/configuration.md  every config key: type, default, constraints, description (the pydantic schema)
    reference/formats.md        every field of every file the stages hand each other (their pydantic models)
    results.md                  benchmarks/RESULTS.md, with its figures' files under results/

None of these pages is a file in docs/: they exist only in the built site, made from the code of the
checkout being built, so they cannot go stale. The page functions are plain (no mkdocs needed) and
tests/test_docs.py checks that every key, flag and field is in them.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import io
import json
import re
import textwrap
import tokenize
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "RESULTS.md"


# ---------------------------------------------------------------------------------------------- helpers


def cell(text: str) -> str:
    """`text` made safe for one cell of a Markdown table: one line, `|` escaped, `<` and `>` outside code
    spans as entities (a description's `<run_dir>` would otherwise be taken for an HTML tag)."""
    parts = re.split(r"(`[^`]*`)", " ".join(text.split()))
    out = [
        p if p.startswith("`") else re.sub(r"([*_])", r"\\\1", p.replace("<", "&lt;").replace(">", "&gt;"))
        for p in parts
    ]  # `*` and `_` as they are: a glob's `**/*.txt` is no emphasis
    return "".join(out).replace("|", "\\|")


def code(value: str) -> str:
    """`value` as an inline code span (backticks inside it doubled around)."""
    return f"`` {value} ``" if "`" in value else f"`{value}`"


def type_name(annotation: Any) -> str:
    """A type as a reader of YAML or JSON says it: `integer`, `list of string`, `one of a, b`, `... or null`."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is typing.Literal:
        return "one of " + ", ".join(str(a) for a in args)
    if origin in (typing.Union, types.UnionType) and all("kind" in getattr(a, "model_fields", {}) for a in args):
        return "sections by kind: " + ", ".join(type_name(a).removeprefix("kind ") for a in args)
    if origin in (typing.Union, types.UnionType):
        present = [a for a in args if a is not type(None)]
        if len(present) == 1:
            return f"{type_name(present[0])} or null" if len(args) > 1 else type_name(present[0])
        return " or ".join(type_name(a) for a in present) + (" or null" if len(present) < len(args) else "")
    if origin in (list, tuple, set, frozenset):
        return f"list of {type_name(args[0])}" if args else "list"
    if origin is dict:
        return f"map of {type_name(args[0])} to {type_name(args[1])}" if args else "map"
    names = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null", Any: "any"}
    if annotation in names:
        return names[annotation]
    kind = getattr(annotation, "model_fields", {}).get("kind")
    if kind is not None and typing.get_origin(kind.annotation) is typing.Literal:  # a source, by its kind
        return "kind " + " or ".join(typing.get_args(kind.annotation))
    return getattr(annotation, "__name__", str(annotation))


def constraints(metadata: list[Any]) -> str:
    """A field's constraints (annotated-types bounds, lengths, a pattern) as `>= 1, < 1`."""
    out = []
    for item in metadata:
        for attr, sign in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            if getattr(item, attr, None) is not None:
                out.append(f"{sign} {getattr(item, attr)}")
        if getattr(item, "min_length", None) is not None:
            out.append(f"at least {item.min_length} items")
        if getattr(item, "max_length", None) is not None:
            out.append(f"at most {item.max_length} items")
        if getattr(item, "pattern", None) is not None:
            out.append(f"matches {item.pattern}")
    return ", ".join(out)


def default_value(value: Any) -> str:
    """A default as the YAML (JSON flow) a user would write; `null` for None."""
    from pydantic import BaseModel

    def plain(v: Any) -> Any:
        if isinstance(v, BaseModel):
            return v.model_dump(mode="json")
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    return json.dumps(plain(value), ensure_ascii=False)


def docstring(obj: Any) -> str:
    """The cleaned docstring of a class, as Markdown paragraphs; '' for pydantic's or dataclasses' stand-ins."""
    doc = obj.__dict__.get("__doc__") if isinstance(obj, type) else obj.__doc__
    if not doc or doc.startswith(obj.__name__ + "("):  # a dataclass's generated signature
        return ""
    return "\n".join(cell(p) if p.strip() else "" for p in inspect.cleandoc(doc).split("\n"))


def trailing_comments(cls: type) -> dict[str, str]:
    """`name -> comment` for each `name: type = value  # comment` statement of the class body: what a format
    model or an enum says of a field where it has no pydantic description."""
    source = textwrap.dedent(inspect.getsource(cls))
    comments: dict[str, str] = {}
    name, line = None, -1
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.NEWLINE, tokenize.NL):
            if tok.type == tokenize.NEWLINE:
                name = None
            continue
        if name is None and tok.type == tokenize.NAME and tok.start[1] == 4:
            name, line = tok.string, tok.start[0]
        elif tok.type == tokenize.COMMENT and name is not None and tok.start[0] == line:
            comments.setdefault(name, tok.string.lstrip("# ").strip())
    return comments


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table of cells already made safe (`cell`, `code`)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def load(dotted: str) -> Any:
    """`package.module.Name` -> the object."""
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


# ---------------------------------------------------------------------------------------- the config


def _schema_class(annotation: Any) -> type | None:
    """The config section class of a field (unwrapping `| None`), else None."""
    from core.schema import Schema

    present = (
        [a for a in typing.get_args(annotation) if a is not type(None)]
        if typing.get_origin(annotation) in (typing.Union, types.UnionType)
        else [annotation]
    )
    if len(present) == 1 and isinstance(present[0], type) and issubclass(present[0], Schema):
        return present[0]
    return None


def _list_members(annotation: Any) -> list[type]:
    """The section classes of a list field's items: one, or each member of a discriminated union."""
    if typing.get_origin(annotation) is not list:
        return []
    item = typing.get_args(annotation)[0]
    if typing.get_origin(item) is typing.Annotated:
        item = typing.get_args(item)[0]
    members = typing.get_args(item) if typing.get_origin(item) in (typing.Union, types.UnionType) else (item,)
    schema = [_schema_class(m) for m in members]
    return [m for m in schema if m is not None]


@dataclasses.dataclass
class Section:
    """One table of the configuration page: the keys of one schema class at `prefix`."""

    prefix: str  # `prepare.filters`, `prepare.sources[]`; '' for the top level
    cls: type
    variant: str = ""  # a source's `kind`, for the members of a discriminated union
    optional: bool = False  # the section may be null (mine.gold)
    keys: list[tuple[str, Any]] = dataclasses.field(default_factory=list)  # (dotted key, FieldInfo)


def config_sections(cls: type | None = None, prefix: str = "") -> Iterator[Section]:
    """Every section of the run configuration, depth first, each with its own keys (not its subsections)."""
    if cls is None:  # the root of the walk: the whole run configuration
        from orchestration.config import Config

        cls = Config
    section = Section(prefix, cls)
    below: list[Section] = []
    for name, info in cls.model_fields.items():
        key = f"{prefix}.{name}" if prefix else name
        nested, members = _schema_class(info.annotation), _list_members(info.annotation)
        if nested is not None and info.annotation is nested:
            below.extend(config_sections(nested, key))
            continue
        section.keys.append((key, info))
        if nested is not None:  # an optional section: the key itself, and its keys
            for sub in config_sections(nested, key):
                sub.optional = sub.optional or sub.prefix == key
                below.append(sub)
        for member in members:
            kind = member.model_fields.get("kind")
            variant = ", ".join(typing.get_args(kind.annotation)) if len(members) > 1 and kind else ""
            for sub in config_sections(member, f"{key}[]"):
                sub.variant = sub.variant or variant
                below.append(sub)
    if section.keys:
        yield section
    yield from below


def config_keys() -> list[str]:
    """Every dotted key of the configuration, as the reference names it (list items as `key[].field`)."""
    return [key for section in config_sections() for key, _ in section.keys]


def config_page() -> str:
    """reference/configuration.md."""
    from orchestration.config import MOVED_KEYS

    out = [
        "# Configuration reference",
        "",
        (
            "Generated from the pydantic schema (`orchestration/config/`, `pipelines/config.py`, "
            "`pipelines/source_config.py`, `core/normalize.py`) at every build of these docs. One YAML file per "
            "run (`-c FILE`), any key overridden on the command line as `section.key=value` "
            '(`train.lr=3e-4`, `"prepare.sources=[{kind: bible}]"`); unknown keys, wrong types and values '
            "outside the constraints are refused before any work (exit 2), naming the key and the file's "
            "line. `interlingua config -c FILE` prints the resolved configuration, every default filled in. "
            "A list of sections (`prepare.sources`, `train.paths`, `evaluate.testsets`, `mine.inputs`) is "
            "written `key[]` here; its items' keys are `key[].field`."
        ),
        "",
    ]
    for section in config_sections():
        title = f"`{section.prefix}`" if section.prefix else "Top level"
        if section.variant:
            title += f" with `kind: {section.variant}`"
        out += [f"## {title}", ""]
        intro = docstring(section.cls)
        if section.optional:
            intro = (intro + "\n\n" if intro else "") + "Optional: the whole section may be left out (null)."
        if intro:
            out += [intro, ""]
        rows = []
        for key, info in section.keys:
            required = info.is_required()
            default = "required" if required else code(default_value(info.get_default(call_default_factory=True)))
            rows.append(
                [
                    code(key),
                    cell(type_name(info.annotation)),
                    default,
                    cell(constraints(info.metadata)),
                    cell(info.description or ""),
                ]
            )
        out += [table(["key", "type", "default", "constraints", "description"], rows), ""]
    out += [
        "## Keys that moved",
        "",
        ("Configs and model directories written before a key moved still load, with a warning naming its new place:"),
        "",
        table(["old key", "new key"], [[code(old), code(new)] for old, new in MOVED_KEYS.items()]),
        "",
    ]
    return "\n".join(out)


def undescribed_config_keys() -> list[str]:
    """The keys whose schema field has no description (the reference shows them without one); a list item's
    key names its kind where the list holds several (`prepare.sources[].name (kind: text)`)."""
    return [
        key + (f" (kind: {section.variant})" if section.variant else "")
        for section in config_sections()
        for key, info in section.keys
        if not info.description
    ]


# ------------------------------------------------------------------------------------------- the CLI


def _commands() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser], dict[str, str]]:
    """The main parser, each command's parser and its one-line help."""
    from orchestration.cli import parser

    main = parser()
    sub = next(a for a in main._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    return main, dict(sub.choices), helps


def _flag_rows(p: argparse.ArgumentParser) -> list[list[str]]:
    """One row per argument of a parser: its names, its value, its default, its help."""
    rows = []
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        names = ", ".join(code(s) for s in action.option_strings) or code(action.metavar or action.dest)
        if action.nargs == 0:
            value = ""
        elif action.choices:
            value = "one of " + ", ".join(str(c) for c in action.choices)
        else:
            value = action.metavar or action.dest.upper()
            value = code(value + (" ..." if action.nargs in ("*", "+") else ""))
        default = action.default
        shown = (
            ""
            if default in (None, False, argparse.SUPPRESS) or action.nargs == 0
            else code(" ".join(default) if isinstance(default, list) else str(default))
        )
        if action.required and action.nargs not in ("*", "?"):  # argparse marks every positional required
            shown = "required"
        rows.append([names, cell(value), shown, cell(action.help or "")])
    return rows


def exit_codes() -> list[tuple[int, str, str]]:
    """(code, name, what it means) of every exit code, from `core.errors.Exit` and its comments."""
    from core.errors import Exit

    comments = trailing_comments(Exit)
    return [(int(member), name, comments.get(name, "")) for name, member in Exit.__members__.items()]


def command_exit_codes(name: str, p: argparse.ArgumentParser) -> list[int]:
    """The codes a command can exit with: every command's, 5 for those that hold the run dir's lock, and
    those whose comment says they are `run`'s alone."""
    from core.errors import Exit

    codes = []
    for code_, _member, meaning in exit_codes():
        if meaning.startswith("run:") and name != "run":
            continue
        if code_ == Exit.ALREADY_RUNNING and not (p.get_default("locks") or name == "run"):
            continue
        codes.append(code_)
    return codes


def cli_page() -> str:
    """reference/cli.md."""
    main, commands, helps = _commands()
    out = [
        "# Command-line reference",
        "",
        (
            "Generated from the parser (`orchestration/cli/`) at every build of these docs; "
            "`interlingua COMMAND --help` prints the same, ending with an example."
        ),
        "",
        "```",
        main.format_usage().strip(),
        "```",
        "",
        cell(main.description or ""),
        "",
        (
            "Every command takes `-c/--config FILE` and `section.key=value` overrides "
            "([configuration reference](configuration.md)); `prepare` and `run` pass every other `--flag` to "
            "Apache Beam unchanged (`--runner=DaskRunner`, `--flink_master=...`)."
        ),
        "",
        "## Global flags",
        "",
        table(["flag", "value", "default", "description"], _flag_rows(main)),
        "",
        "## Exit codes",
        "",
        ("One table for every command (`core.errors.Exit`); each command's section lists those it can return."),
        "",
        table(["code", "name", "meaning"], [[str(c), code(n), cell(m)] for c, n, m in exit_codes()]),
        "",
        "## Commands",
        "",
        table(["command", "what it does"], [[f"[`{n}`](#interlingua-{n})", cell(helps.get(n, ""))] for n in commands]),
        "",
    ]
    for name, p in commands.items():
        out += [f"## interlingua {name}", "", cell(helps.get(name, "")) + ".", ""]
        if p.description:
            out += [cell(p.description), ""]
        out += [
            "```",
            p.format_usage().strip().removeprefix("usage: "),
            "```",
            "",
            table(["flag", "value", "default", "description"], _flag_rows(p)),
            "",
            "Exit codes: " + ", ".join(str(c) for c in command_exit_codes(name, p)) + ".",
            "",
        ]
        if p.epilog:
            out += ["```sh", p.epilog.removeprefix("Example:").strip(), "```", ""]
    return "\n".join(out)


def cli_flags() -> dict[str, list[str]]:
    """command ('' for the main parser) -> every option string and positional name it takes."""
    main, commands, _ = _commands()
    out = {}
    for name, p in [("", main), *commands.items()]:
        out[name] = [
            s
            for a in p._actions
            if not isinstance(a, argparse._SubParsersAction)
            for s in (a.option_strings or [a.metavar or a.dest])
        ]
    return out


def undescribed_flags() -> list[str]:
    """`command flag` of every flag without a help text."""
    main, commands, _ = _commands()
    return [
        f"{name or 'interlingua'} {'/'.join(a.option_strings) or a.dest}"
        for name, p in [("", main), *commands.items()]
        for a in p._actions
        if not isinstance(a, argparse._SubParsersAction) and not a.help
    ]


# ----------------------------------------------------------------------------------- on-disk formats

# Each file the stages hand each other: (file, model, read / written by). The models are the formats' one
# definition (docs/layout.md, "Where things live").
FORMATS = [
    (
        "`<dataset>/manifest.json`",
        "core.dataset.DatasetManifest",
        "`load_manifest` / `core.dataset_writer.write_manifest` (prepare's commit)",
    ),
    ("`<dataset>/teacher/<fp>/manifest.json`", "core.teacher.TeacherManifest", "`TeacherStore.open` / `publish`"),
    (
        "a model file's header (`model.safetensors`)",
        "model.args.ModelArgs",
        "`model.model_file.read_header` / `save_model` (the constructor's arguments)",
    ),
    (
        "a model file's header (`model.safetensors`)",
        "model.args.ModelMeta",
        "`model.model_file.read_header` / `save_model` (what the model was trained with)",
    ),
    (
        "`<run_dir>/train/run.json`",
        "orchestration.train.record.TrainRecord",
        "`adapters.state.read_state` / `OutputFolder.write_record` (`train.train_dir.TrainKind`)",
    ),
    (
        "`<evaluation>/state.json`",
        "orchestration.evaluate.EvaluationRecord",
        "`read_state` / `stage.run`'s commit (`state_bytes`, last)",
    ),
    (
        "a model directory's `progress.json`",
        "orchestration.train.checkpoint.TrainingProgress",
        "`checkpoint.export` (evaluate reads its step: `model_dir.trained_steps`)",
    ),
    ("`<store>/part-NNNNN.json`", "evaluation.store.BlockRecord", "`read_record` / `store_writer.write_record`"),
    ("`<store>/manifest.json`", "evaluation.store.StoreManifest", "`read_manifest` / `store_writer.write_manifest`"),
    (
        "`<store>/manifest.json`, `meta` of evaluate's stores",
        "evaluation.store.EmbeddingsMeta",
        "`evaluate` (its stored embeddings)",
    ),
    (
        "`<store>/manifest.json`, `meta` of embed's stores",
        "orchestration.embed.folder.EmbedMeta",
        "`interlingua embed -o DIR`",
    ),
    (
        "`<translated>/part-NNNNN.json`",
        "orchestration.embed.translate_corpus.TranslationRecord",
        "`read_records` / `interlingua translate -o DIR` (after the block's text)",
    ),
    (
        "`<translated>/manifest.json`",
        "orchestration.embed.translate_corpus.TranslationsManifest",
        "`read_manifest`, `open_translations` / `interlingua translate -o DIR` (last)",
    ),
    ("`<mined>/manifest.json`", "core.mined.MinedManifest", "`read_manifest` / `write_manifest`"),
    ("`<export>/manifest.json`", "orchestration.embedding.export.ExportManifest", "`read_manifest` / `export_model`"),
    ("`<catalogs>/catalogs.json`", "pipelines.debian_catalogs.CatalogsManifest", "`read_manifest` / `fetch`"),
]


def _record_fields(cls: type) -> list[tuple[str, Any, str, str]]:
    """(key in the file, annotation, default or 'required', description) of a pydantic model or a dataclass;
    the description is the field's own, else its line's comment."""
    comments = trailing_comments(cls)
    out = []
    if dataclasses.is_dataclass(cls):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                default = code(default_value(f.default))
            elif f.default_factory is not dataclasses.MISSING:
                made = f.default_factory()
                default = code(default_value(dataclasses.asdict(made) if dataclasses.is_dataclass(made) else made))
            else:
                default = "required"
            out.append((f.name, hints[f.name], default, comments.get(f.name, "")))
        return out
    for name, info in cls.model_fields.items():
        default = "required" if info.is_required() else code(default_value(info.get_default(call_default_factory=True)))
        out.append((info.alias or name, info.annotation, default, info.description or comments.get(name, "")))
    return out


def _records_in(annotation: Any) -> list[type]:
    """The models and dataclasses a field's type holds (in lists, maps, unions)."""
    from pydantic import BaseModel

    if isinstance(annotation, type) and (issubclass(annotation, BaseModel) or dataclasses.is_dataclass(annotation)):
        return [annotation]
    return [cls for arg in typing.get_args(annotation) for cls in _records_in(arg)]


def formats_page() -> str:
    """reference/formats.md."""
    out = [
        "# On-disk formats",
        "",
        (
            "Every file one stage writes and another reads is one pydantic model (a dataclass for "
            "`progress.json`), in the module that owns the format, read and written through that module's "
            "pair of helpers; a damaged file is refused naming its first wrong field. Generated from those "
            "models at every build of these docs; `tests/orchestration/test_records.py` round-trips each (the "
            "model header: `tests/model/test_model.py`; the teacher's: "
            "`tests/orchestration/train/test_teacher.py`). A name in a manifest is a relative path inside its "
            "folder ([reliability](../reliability.md"
            "#the-filesystem-boundary-one-reader-of-untrusted-folders-one-set-of-writer-rules))."
        ),
        "",
        table(
            ["file", "model", "read / written by"],
            [[cell(f), f"[`{m}`](#{m.rsplit('.', 1)[1].lower()})", cell(by)] for f, m, by in FORMATS],
        ),
        "",
    ]
    done: set[type] = set()
    for file, dotted, _ in FORMATS:
        cls = load(dotted)
        where = cell(file)
        out += [f"## {cls.__name__}", "", f"{where[0].upper()}{where[1:]}: `{dotted}`.", ""]
        queue = [cls]
        while queue:
            current = queue.pop(0)
            if current in done:
                continue
            done.add(current)
            fields = _record_fields(current)
            if current is not cls:
                out += [f"### {current.__name__}", "", f"`{current.__module__}.{current.__name__}`.", ""]
            intro = docstring(current)
            if intro:
                out += [intro, ""]
            out += [
                table(
                    ["field", "type", "default", "description"],
                    [[code(k), cell(type_name(t)), d, cell(desc)] for k, t, d, desc in fields],
                ),
                "",
            ]
            queue += [r for _, t, _, _ in fields for r in _records_in(t) if r not in done]
    return "\n".join(out)


def format_fields() -> dict[str, list[str]]:
    """model's dotted name -> the keys of its fields, as the file holds them."""
    return {dotted: [k for k, _, _, _ in _record_fields(load(dotted))] for _, dotted, _ in FORMATS}


# ------------------------------------------------------------------------------------------- results


def results_page() -> str:
    """results.md: benchmarks/RESULTS.md, its links to the docs and the changelog made site links."""
    text = re.sub(r"\]\(\.\./docs/([^)]*)\)", r"](\1)", RESULTS.read_text())
    return text.replace("](../CHANGELOG.md)", "](changelog.md)")


def changelog_page() -> str:
    """changelog.md: CHANGELOG.md, its links to the docs and the results made site links."""
    text = re.sub(r"\]\(docs/([^)]*)\)", r"](\1)", (ROOT / "CHANGELOG.md").read_text())
    return re.sub(r"\]\(benchmarks/RESULTS\.md(#[^)]*)?\)", r"](results.md\1)", text)


GENERATED = {
    "reference/cli.md": cli_page,
    "reference/configuration.md": config_page,
    "reference/formats.md": formats_page,
    "results.md": results_page,
    "changelog.md": changelog_page,
}


# --------------------------------------------------------------------------------------- mkdocs hooks


def on_files(files, config):
    """Add the generated pages, and RESULTS.md's figures (benchmarks/results/) under results/."""
    from mkdocs.structure.files import File, InclusionLevel

    for uri, make in GENERATED.items():
        files.append(File.generated(config, uri, content=make()))
    for path in sorted((RESULTS.parent / "results").iterdir()):
        if path.is_file():  # rows, plots and a benchmark's own report: linked from the Results page, not in the nav
            files.append(
                File.generated(
                    config, f"results/{path.name}", abs_src_path=str(path), inclusion=InclusionLevel.NOT_IN_NAV
                )
            )
    return files


_RESULTS_LINK = re.compile(r"\]\(((?:\.\./)+)benchmarks/RESULTS\.md(#[^)\s]*)?\)")


def on_page_markdown(markdown, page, config, files):
    """A docs page's link to ../benchmarks/RESULTS.md (what GitHub follows) -> the site's Results page."""
    depth = page.file.src_uri.count("/")

    def site_link(match: re.Match) -> str:
        if len(match.group(1)) // 3 != depth + 1:  # not the repository's benchmarks/ folder
            return match.group(0)
        return f"]({'../' * depth}results.md{match.group(2) or ''})"

    return _RESULTS_LINK.sub(site_link, markdown)
