"""Translation memories (TMX 1.4b, also 1.1's `lang`) as N-way tuples, streamed with lxml's iterparse.

Each `<tu>` is one tuple, keyed by its file and its position there; each of its `<tuv>` is one sentence, in
the language of its `xml:lang`: lower-cased, `_` read as `-`, then the source's `lang_map` (the whole tag, e.g.
`zh-tw: zh_Hant`), else the primary subtag (`fr-FR` -> `fr`). Languages the source does not list are not read.
A segment's inline codes (`bpt`, `ept`, `ph`, `it`, `ut`, with any `sub` inside) are removed and `hi` keeps its
text. Elements are cleared as soon as they are read, so memory stays flat on a file of any size; one read task
per file. A file that is not well-formed XML, or not TMX, fails before the job, naming the file and line.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator

from core.dataset import file_sha256
from pipelines.errors import SourceError
from pipelines.read_task import ReadTask, SourcePlan
from pipelines.source_config import TmxSource

XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
CODES = frozenset({"bpt", "ept", "ph", "it", "ut"})  # native codes: removed with what they hold


def tmx_files(source: TmxSource) -> list[str]:
    files = sorted(p for p in glob.glob(source.path) if os.path.isfile(p))
    if not files:
        raise SourceError(f"source path {source.path!r} matches no file")
    return files


def language(tag: str, lang_map: dict[str, str]) -> str:
    """The source's language code of an `xml:lang` (the rule in the module doc)."""
    tag = tag.strip().lower().replace("_", "-")
    return lang_map.get(tag) or tag.split("-", 1)[0]


def segment_text(seg) -> str:
    """A `<seg>`'s text without its inline codes; `hi` (and other markup) keeps its text."""
    parts = [seg.text or ""]
    for child in seg:
        if _local(child.tag) not in CODES:
            parts.append(segment_text(child))
        parts.append(child.tail or "")
    return "".join(parts)


def _local(tag) -> str:
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _units(path: str, lang_map: dict[str, str], wanted: frozenset[str]) -> Iterator[dict[str, str]]:
    """Each `<tu>` of the file as {language: text} of the wanted languages (empty when it has none of them);
    SourceError naming the file and line for XML that is not well-formed, or a root that is not `<tmx>`."""
    from lxml import etree

    try:
        context = etree.iterparse(
            path, events=("start", "end"), huge_tree=True, resolve_entities=False, no_network=True
        )
        root_seen = False
        for event, element in context:
            if event == "start":
                if not root_seen:
                    root_seen = True
                    if _local(element.tag) != "tmx":
                        raise SourceError(
                            f"{path}: line {element.sourceline}: the root is <{_local(element.tag)}>, "
                            "not <tmx>: not a translation memory"
                        )
                continue
            if _local(element.tag) != "tu":
                continue
            unit: dict[str, str] = {}
            for tuv in element:
                if _local(tuv.tag) != "tuv":
                    continue
                tag = tuv.get(XML_LANG) or tuv.get("lang")
                if tag is None:
                    raise SourceError(f"{path}: line {tuv.sourceline}: a <tuv> without xml:lang")
                lang = language(tag, lang_map)
                seg = next((c for c in tuv if _local(c.tag) == "seg"), None)
                if lang in wanted and seg is not None:
                    unit[lang] = " ".join(segment_text(seg).split())
            yield unit
            element.clear()  # and what came before it: memory stays flat
            while element.getprevious() is not None:
                del element.getparent()[0]
    except etree.XMLSyntaxError as exc:
        raise SourceError(f"{path}: line {exc.lineno}: not well-formed XML: {exc.msg}") from None


def plan_tmx(source: TmxSource, name: str) -> SourcePlan:
    """A read task per file; each file streamed once here (checked, its units counted)."""
    wanted = frozenset(source.languages)
    tasks, prints, records = [], [], 0
    for index, path in enumerate(tmx_files(source)):
        units = sum(1 for _ in _units(path, source.lang_map, wanted))
        records += units
        prints.append({"source": name, "path": path, "sha256": file_sha256(path)})
        tasks.append(
            ReadTask(
                source=name,
                kind="tmx",
                languages=tuple(source.languages),
                start_line=0,
                n_lines=units,
                paths={"": path},
                lang_map=dict(source.lang_map),
                index=index,
            )
        )
    return SourcePlan(tasks, prints, records)


def read_tmx(task: ReadTask) -> Iterator[tuple[str, dict[str, str]]]:
    """(key, {lang: text}) for each `<tu>` of the task's file; the key is the file's index and the unit's."""
    for n, unit in enumerate(_units(task.paths[""], task.lang_map, frozenset(task.languages))):
        yield f"{task.source}:{task.index}:{n}", unit
