"""The gettext source on the catalogs this machine's packages ship (/usr/share/locale), checked against
Python's own MO reader (`gettext.GNUTranslations`); PO files made from them by polib, with real entries marked
fuzzy and obsolete; the noise rule of messages."""

from __future__ import annotations

import gettext
from pathlib import Path

import polib
import pytest

from pipelines.catalogs import (
    FUZZY,
    OBSOLETE,
    SAME_AS_SOURCE,
    UNTRANSLATED,
    Skip,
    message_text,
    plan_gettext,
    read_gettext,
)
from pipelines.errors import SourceError
from pipelines.source_config import GettextSource

LOCALE = Path("/usr/share/locale")
LANGS = ["en", "fr", "es", "ru", "zh"]
LOCALES = {"zh": "zh_CN"}
CATALOGS = ["Linux-PAM", "apt"]  # shipped by libpam-runtime and apt, on every Debian system


def shipped(lang: str, catalog: str) -> Path:
    path = LOCALE / LOCALES.get(lang, lang) / "LC_MESSAGES" / f"{catalog}.mo"
    assert path.is_file(), f"{path}: this Debian system's catalog is missing (reinstall its package)"
    return path


def source(path: str, **kw) -> GettextSource:
    return GettextSource(kind="gettext", path=path, languages=kw.pop("languages", LANGS), locales=LOCALES, **kw)


@pytest.mark.parametrize(
    "raw, text",
    [
        ("_File", "File"),
        ("&Open", "Open"),
        ("~Save", "Save"),
        ("Save _As…", "Save As…"),
        ("文件(_F)", "文件"),
        ("Datei (&D)", "Datei"),
        ("Tom && Jerry", "Tom & Jerry"),
        ("snake_case and file_name", "snake_case and file_name"),
        ("%s failed: exit code %d", "failed: exit code"),
        ("%(count)s files in %1$s", "files in"),
        ("{0} of {name}", "of"),
        ("Delete %s?", "Delete?"),
        ("%.*s on %-5.2f", "on"),
        ("100%%", ""),
        ('<b>Bold</b> and <a href="x">a link</a>', "Bold and a link"),
        ("two\nlines", "two lines"),
        ("%s", ""),
        ("  ", ""),
    ],
)
def test_the_noise_rule_of_messages(raw, text):
    assert message_text(raw) == text


def test_each_message_is_one_tuple_across_languages_as_pythons_own_reader_reads_it():
    plan = plan_gettext(source(str(LOCALE / "{lang}" / "LC_MESSAGES" / "*.mo"), catalogs=CATALOGS), "deb")
    assert [t.catalog for t in plan.tasks] == sorted(CATALOGS)
    assert {p["path"] for p in plan.fingerprints} == {str(shipped(lang, c)) for lang in LANGS[1:] for c in CATALOGS}
    records = {key: record for task in plan.tasks for key, record in read_gettext(task)}
    assert len(records) == plan.records > 400
    readers = {(lang, c): gettext.GNUTranslations(open(shipped(lang, c), "rb")) for lang in LANGS[1:] for c in CATALOGS}
    checked = 0
    for key, record in records.items():
        source_name, catalog, _ = key.split(":")
        assert source_name == "deb" and catalog in CATALOGS
        for lang in LANGS[1:]:
            if lang not in record:
                continue
            if isinstance(record[lang], Skip):
                assert record[lang] in (SAME_AS_SOURCE, UNTRANSLATED), (key, record)
                continue
            # the stdlib's reader: the msgstr of the msgid (without a context: those are looked up apart)
            catalog_reader = readers[(lang, catalog)]
            found = [
                m
                for m in catalog_reader._catalog
                if isinstance(m, str) and "\x04" not in m and message_text(m) == record["en"]
            ]
            if len(found) == 1:
                assert record[lang] == message_text(catalog_reader.gettext(found[0])), (key, lang)
                checked += 1
    assert checked > 1000
    # an N-way tuple: one message in every language
    assert (
        sum(all(isinstance(record.get(lang), str) and record[lang] for lang in LANGS) for record in records.values())
        > 300
    )


def test_po_files_fuzzy_obsolete_untranslated_and_plural_entries(tmp_path):
    """PO files as translators keep them: polib writes the shipped fr and es catalogs of Linux-PAM as PO, and
    real entries are marked fuzzy, made obsolete or left untranslated."""
    for lang in ("fr", "es"):
        po = polib.mofile(str(shipped(lang, "Linux-PAM")))
        folder = tmp_path / lang
        folder.mkdir()
        po.save_as_pofile(str(folder / "Linux-PAM.po"))
    fr = polib.pofile(str(tmp_path / "fr" / "Linux-PAM.po"))
    plural = next(e for e in fr if e.msgid_plural)
    singles = [e for e in fr if not e.msgid_plural and e.msgstr]
    singles[0].flags.append("fuzzy")
    singles[1].obsolete = True
    singles[2].msgstr = ""
    fr.save()
    plan = plan_gettext(source(str(tmp_path / "{lang}" / "*.po"), languages=["en", "fr", "es"]), "po")
    records = {key: record for task in plan.tasks for key, record in read_gettext(task)}
    by_msgid = {record["en"]: record for record in records.values()}
    assert by_msgid[message_text(singles[0].msgid)]["fr"] == FUZZY
    assert by_msgid[message_text(singles[1].msgid)]["fr"] == OBSOLETE
    assert by_msgid[message_text(singles[2].msgid)]["fr"] == UNTRANSLATED
    assert by_msgid[message_text(singles[0].msgid)]["es"] not in (FUZZY, OBSOLETE)  # es keeps its own state
    assert by_msgid[message_text(plural.msgid)]["fr"] == message_text(plural.msgstr_plural[0])  # the singular


def test_a_damaged_catalog_or_an_empty_glob_is_named(tmp_path):
    folder = tmp_path / "fr"
    folder.mkdir()
    (folder / "broken.mo").write_bytes(shipped("fr", "Linux-PAM").read_bytes()[:100])
    with pytest.raises(SourceError, match=r"broken\.mo: not a readable gettext catalog"):
        plan_gettext(source(str(tmp_path / "{lang}" / "*.mo"), languages=["en", "fr"]), "x")
    (folder / "broken.mo").unlink()
    lines = polib.mofile(str(shipped("fr", "Linux-PAM"))).__unicode__().splitlines()
    lines.insert(20, 'msgstr "a second msgstr"')
    (folder / "broken.po").write_text("\n".join(lines))
    with pytest.raises(SourceError, match=r"broken\.po: not a readable gettext catalog.*line"):
        plan_gettext(source(str(tmp_path / "{lang}" / "*.po"), languages=["en", "fr"]), "x")
    with pytest.raises(SourceError, match=r"no catalog.*\['de'\]"):
        plan_gettext(source(str(tmp_path / "{lang}" / "*.po"), languages=["en", "de"]), "x")


def test_the_config_names_what_is_wrong():
    with pytest.raises(ValueError, match=r"\{lang\}"):
        source("/usr/share/locale/fr/*.mo")
    with pytest.raises(ValueError, match="source_language 'en'"):
        source("/x/{lang}/*.mo", languages=["fr", "es"])
