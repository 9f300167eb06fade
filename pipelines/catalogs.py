"""Localization catalogs (gettext PO and MO files, read with polib) as N-way tuples, and the messages' noise.

A message is one tuple: its key is (catalog, msgctxt, msgid), its source-language sentence the msgid, and
each language's sentence that language's msgstr; the catalog is the file's name without its suffix
(`coreutils` for `.../fr/LC_MESSAGES/coreutils.mo`), so the same catalog in every language's folder is read
together, as one read task. A plural entry gives its singular (msgid, msgstr[0]).

A translation that is not one is dropped and counted under its reason (`Skip`): `fuzzy` (a PO entry marked
fuzzy), `obsolete` (a PO `#~` entry), `untranslated` (an empty msgstr) and `same_as_source` (a msgstr equal
to the msgid: a term left in English). The msgid is kept whatever its translations.

`message_text` is the documented rule for the messages' noise:
- markup tags (`<b>`, `</a>`, `<span ...>`) are removed, their text kept;
- accelerator markers are removed: a trailing `(_F)` or `(&F)` (CJK style) whole, else `_`, `&` or `~`
  before a letter or digit at the start of a word (`_File`, `&Open`, `~Save`; `&&` is a literal `&`);
- format placeholders (`%s`, `%d`, `%-5.2f`, `%1$s`, `%(name)s`, `{0}`, `{name}`, `%%`) are removed;
- line breaks and runs of spaces become one space, and spaces left before punctuation go.
A message with no letter left is empty, and `clean` drops it as such.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

from core.dataset import file_sha256
from pipelines.errors import SourceError
from pipelines.read_task import ReadTask, SourcePlan
from pipelines.source_config import GettextSource

SUFFIXES = (".mo", ".po")

_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9:_-]*(\s[^<>]*)?/?>")
_CJK_ACCELERATOR = re.compile(r"\s*\((?:_|&)[A-Za-z0-9]\)")
_ACCELERATOR = re.compile(r"(?<![\w&])[_&~](?=[^\W_])")
_PLACEHOLDER = re.compile(
    r"%(?:\d+\$)?(?:\([^)]*\))?[-+ #0']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|q|j|z|t|I)*"
    r"[diouxXeEfFgGaAcsSpn]|%%|\{[A-Za-z0-9_.]*(?:![rsa])?(?::[^{}]*)?\}"
)
_SPACES = re.compile(r"\s+")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([.,;:!?)\]])")
_LETTER = re.compile(r"[^\W\d_]")


def message_text(text: str) -> str:
    """A message without markup, accelerators and placeholders, on one line (the rule in the module doc)."""
    text = _TAG.sub("", text)
    text = _CJK_ACCELERATOR.sub("", text)
    text = _ACCELERATOR.sub("", text).replace("&&", "&")
    text = _PLACEHOLDER.sub("", text)
    text = _SPACE_BEFORE_PUNCT.sub(r"\1", _SPACES.sub(" ", text)).strip()
    return text if _LETTER.search(text) else ""


@dataclass(frozen=True)
class Skip:
    """A sentence that was read and is dropped under `reason`, in a record's place of its text."""

    reason: str


FUZZY, OBSOLETE, UNTRANSLATED, SAME_AS_SOURCE = (
    Skip("fuzzy"),
    Skip("obsolete"),
    Skip("untranslated"),
    Skip("same_as_source"),
)


def catalog_files(source: GettextSource, lang: str) -> dict[str, str]:
    """{catalog: file} of one language: the glob with `{lang}` as that language's locale folder."""
    pattern = source.path.replace("{lang}", source.locales.get(lang, lang))
    found: dict[str, str] = {}
    for path in sorted(glob.glob(pattern)):
        name, suffix = os.path.splitext(os.path.basename(path))
        if suffix not in SUFFIXES or not os.path.isfile(path):
            continue
        if (source.catalogs is not None and name not in source.catalogs) or name in source.exclude_catalogs:
            continue
        if name in found:
            raise SourceError(
                f"source path {source.path!r}: catalog {name!r} twice for {lang!r}: {found[name]} "
                f"and {path}; narrow the glob"
            )
        found[name] = path
    return found


def open_catalog(path: str):
    """The polib catalog of a PO or MO file; SourceError naming the file (and, for a PO file, the line)."""
    import polib

    try:
        return polib.mofile(path) if path.endswith(".mo") else polib.pofile(path)
    except Exception as exc:  # noqa: BLE001 - whatever the parser trips on (struct.error on a cut MO) is the file's
        raise SourceError(f"{path}: not a readable gettext catalog: {exc or type(exc).__name__}") from None


def plan_gettext(source: GettextSource, name: str) -> SourcePlan:
    """A read task per catalog found in any translation language; every file opened once here, so that a
    malformed one fails before the job, and counted: the records are the distinct messages."""
    translations = [lang for lang in source.languages if lang != source.source_language]
    by_catalog: dict[str, dict[str, str]] = {}
    for lang in translations:
        for catalog, path in catalog_files(source, lang).items():
            by_catalog.setdefault(catalog, {})[lang] = path
    if not by_catalog:
        raise SourceError(
            f"source {name!r}: no catalog ({', '.join(SUFFIXES)}) matches {source.path!r} for "
            f"{translations} (locale folders: {[source.locales.get(t, t) for t in translations]})"
        )
    tasks, prints, records = [], [], 0
    for catalog, paths in sorted(by_catalog.items()):
        keys: set[str] = set()
        for lang, path in sorted(paths.items()):
            keys.update(_message_key(entry) for entry in open_catalog(path) if entry.msgid)
            prints.append({"source": name, "path": path, "sha256": file_sha256(path), "lang": lang})
        records += len(keys)
        tasks.append(
            ReadTask(
                source=name,
                kind="gettext",
                languages=tuple(source.languages),
                start_line=0,
                n_lines=len(keys),
                paths=paths,
                source_language=source.source_language,
                catalog=catalog,
            )
        )
    return SourcePlan(tasks, prints, records)


def _message_key(entry) -> str:
    return hashlib.sha1(f"{entry.msgctxt or ''}\x04{entry.msgid}".encode()).hexdigest()[:20]


def _translation(entry) -> str | Skip:
    if entry.obsolete:
        return OBSOLETE
    if "fuzzy" in entry.flags:
        return FUZZY
    text = entry.msgstr_plural.get(0, "") if entry.msgid_plural else entry.msgstr
    if not text:
        return UNTRANSLATED
    return SAME_AS_SOURCE if text == entry.msgid else message_text(text)


def read_gettext(task: ReadTask) -> Iterator[tuple[str, dict[str, str | Skip | None]]]:
    """One catalog's messages in every language: (key, {source language: msgid, lang: msgstr or a Skip})."""
    source_lang, catalog = task.source_language, task.catalog
    messages: dict[str, dict[str, str | Skip | None]] = {}
    for lang, path in sorted(task.paths.items()):
        for entry in open_catalog(path):
            if not entry.msgid:  # the header
                continue
            record = messages.setdefault(_message_key(entry), {source_lang: message_text(entry.msgid)})
            record[lang] = _translation(entry)
    for key, record in sorted(messages.items()):
        yield f"{task.source}:{catalog}:{key}", record
