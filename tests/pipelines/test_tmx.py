"""The TMX source on a translation memory of real verses (TMX 1.4b as CAT tools write it: a header, region
tags in xml:lang, inline codes), and on broken files."""

from __future__ import annotations

from pathlib import Path

import pytest
from lxml import etree

from pipelines.errors import SourceError
from pipelines.source_config import TmxSource
from pipelines.tmx import plan_tmx, read_tmx

VERSIONS = {"en-US": "k", "fr-FR": "l", "ES": "v", "zh_CN": "c", "de-DE": "s"}  # de is not asked for below
XML = "{http://www.w3.org/XML/1998/namespace}lang"


def memory(path: Path, verses: dict[str, list[str]], marked: int = 0) -> Path:
    """A TMX 1.4b file of the verses, one <tu> per verse; the first `marked` units carry inline codes around
    their first word (bpt/ept pairs, a placeholder, a highlight, an isolated tag) in every language."""
    root = etree.Element("tmx", version="1.4")
    etree.SubElement(
        root,
        "header",
        creationtool="test",
        creationtoolversion="1",
        segtype="sentence",
        adminlang="en-US",
        srclang="en-US",
        datatype="plaintext",
        **{"o-tmf": "none"},
    )
    body = etree.SubElement(root, "body")
    for n in range(len(next(iter(verses.values())))):
        tu = etree.SubElement(body, "tu", tuid=str(n + 1))
        for tag, lines in verses.items():
            tuv = etree.SubElement(tu, "tuv", {XML: tag})
            seg = etree.SubElement(tuv, "seg")
            if n < marked:
                first, _, rest = lines[n].partition(" ")
                bpt = etree.SubElement(seg, "bpt", i="1")
                bpt.text = "<b>"
                bpt.tail = first
                ept = etree.SubElement(seg, "ept", i="1")
                ept.text = "</b>"
                ept.tail = " "
                hi = etree.SubElement(seg, "hi", type="term")
                hi.text = rest
                ph = etree.SubElement(seg, "ph", x="1")
                ph.text = "{0}"
                it = etree.SubElement(seg, "it", pos="begin")
                it.text = "<i>"
            else:
                seg.text = lines[n]
    etree.ElementTree(root).write(str(path), xml_declaration=True, encoding="UTF-8", pretty_print=True)
    return path


@pytest.fixture(scope="module")
def verses(book_lines):
    lines = book_lines(VERSIONS, [31])  # Obadiah: 21 verses in every version
    return {tag: lines[tag] for tag in VERSIONS}


def test_each_unit_is_a_tuple_of_its_languages_without_inline_codes(tmp_path, verses):
    path = memory(tmp_path / "obadiah.tmx", verses, marked=5)
    source = TmxSource(
        kind="tmx", path=str(tmp_path / "*.tmx"), languages=["en", "fr", "es", "zh_Hans"], lang_map={"zh-cn": "zh_Hans"}
    )
    plan = plan_tmx(source, "tm")
    assert plan.records == 21 and [t.paths[""] for t in plan.tasks] == [str(path)]
    units = list(read_tmx(plan.tasks[0]))
    assert [key for key, _ in units] == [f"tm:0:{n}" for n in range(21)]
    for n, (_, unit) in enumerate(units):
        assert set(unit) == {"en", "fr", "es", "zh_Hans"}  # de-DE is not asked for; fr-FR -> fr, ES -> es
        for lang, tag in (("en", "en-US"), ("fr", "fr-FR"), ("es", "ES"), ("zh_Hans", "zh_CN")):
            assert unit[lang] == " ".join(verses[tag][n].split()), (n, lang)  # codes gone, hi's text kept


def test_a_broken_memory_is_named_with_its_line(tmp_path, verses):
    good = memory(tmp_path / "good.tmx", verses).read_text()
    cases = {
        "cut.tmx": (good[: len(good) // 2], r"cut\.tmx: line \d+: not well-formed XML"),
        "notes.tmx": ('<?xml version="1.0"?>\n<notes><tu/></notes>\n', r"notes\.tmx: line 2: the root is <notes>"),
        "nolang.tmx": (good.replace('xml:lang="ES"', "", 1), r"nolang\.tmx: line \d+: a <tuv> without xml:lang"),
    }
    for name, (text, message) in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(SourceError, match=message):
            plan_tmx(TmxSource(kind="tmx", path=str(tmp_path / name), languages=["en", "fr"]), "tm")
    with pytest.raises(SourceError, match="matches no file"):
        plan_tmx(TmxSource(kind="tmx", path=str(tmp_path / "*.xml"), languages=["en", "fr"]), "tm")
