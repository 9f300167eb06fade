"""Zero-shot cross-lingual transfer (evaluation/transfer.py): labels from verse keys, the split by chapter, the
refusals, and on real Bible text a classifier trained on English vectors that classifies French verses of other
chapters in a shared space, and fails to in two spaces learned apart."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from evaluation.transfer import TransferError, bible_books, held_out, transfer_matrix

# (book, last chapter) per group: a few chapters of one or two books each, about 900 verses
BOOKS = {
    "law": [(1, 6)],
    "history": [(8, 4), (17, 4)],
    "wisdom": [(22, 8)],
    "prophets": [(29, 3), (32, 4), (33, 4)],
    "gospels_acts": [(41, 4)],
    "letters": [(56, 3), (57, 1), (63, 1), (64, 1), (65, 1)],
    "revelation": [(66, 6)],
}


def test_a_verse_key_gives_its_book_group_and_chapter_and_any_other_key_none():
    labels, groups = bible_books(["bible:1:2:3", "bible:19:23:1", "bible:66:22:21", "catalogs:gtk30:17", "bible:x:1:1"])
    assert labels == ["law", "wisdom", "revelation", "", ""]
    assert groups == ["bible:1:2", "bible:19:23", "bible:66:22", "", ""]


def test_the_split_keeps_each_group_on_one_side_whatever_the_order_and_halves_the_groups():
    groups = [f"bible:{b}:{c}" for b in range(1, 40) for c in range(1, 6) for _ in range(3)]
    side = held_out(groups)
    by_group = {}
    for g, s in zip(groups, side):
        by_group.setdefault(g, set()).add(bool(s))
    assert all(len(s) == 1 for s in by_group.values())
    assert 0.4 < np.mean([next(iter(s)) for s in by_group.values()]) < 0.6
    order = np.random.default_rng(0).permutation(len(groups))
    np.testing.assert_array_equal(held_out([groups[i] for i in order]), side[order])


@pytest.mark.parametrize(
    "labels, words",
    [
        (["", "", "", ""], "none of the 4 rows has a label"),
        (["law", "law", "", "law"], "of one class \\('law'\\)"),
    ],
)
def test_labels_that_cannot_be_learned_are_refused_saying_why(labels, words):
    vectors = {"en": np.eye(4, dtype=np.float32)}
    with pytest.raises(TransferError, match=words):
        transfer_matrix(vectors, labels, ["bible:1:1", "bible:1:2", "bible:2:1", "bible:2:2"])


def test_a_side_without_two_classes_and_vectors_of_other_rows_are_refused():
    groups = ["bible:1:1"] * 3 + ["bible:9:9"] * 3  # two groups: one side gets one class at most
    with pytest.raises(TransferError, match="fewer than 2 classes; more groups are needed"):
        transfer_matrix({"en": np.eye(6, dtype=np.float32)}, ["law"] * 3 + ["history"] * 3, groups)
    with pytest.raises(TransferError, match="fr has 5 vectors for 6 labelled rows"):
        transfer_matrix({"en": np.eye(6), "fr": np.eye(6)[:5]}, ["law"] * 6, groups)


@pytest.fixture(scope="module")
def verses(bible_db):
    """{lang: texts} of English and French, and their keys, aligned."""
    db = sqlite3.connect(f"file:{bible_db}?mode=ro", uri=True)
    out: dict[str, list[str]] = {"en": [], "fr": []}
    keys: list[str] = []
    for books in BOOKS.values():
        for book, last in books:
            rows = {
                lang: db.execute(
                    "SELECT cNumber, vNumber, vText FROM bible WHERE bbName=? AND bNumber=? AND cNumber<=?"
                    " ORDER BY cNumber, vNumber",
                    (version, book, last),
                ).fetchall()
                for lang, version in (("en", "k"), ("fr", "l"))
            }
            french = {(c, v): t for c, v, t in rows["fr"]}
            for c, v, text in rows["en"]:
                if (c, v) in french:
                    keys.append(f"bible:{book}:{c}:{v}")
                    out["en"].append(text)
                    out["fr"].append(french[(c, v)])
    return out, keys


def test_a_classifier_of_english_vectors_classifies_french_verses_of_other_chapters_in_a_shared_space(verses):
    """Cross-language LSA (the tf-idf of each English-French verse pair as one document, a truncated SVD), fitted
    on the training chapters' pairs alone: each language's verses are projected alone, so the space is shared. The
    classifier trained on English verses classifies the French verses of held-out chapters about as well as the
    English ones. Two spaces fitted apart (each language's own) share nothing, and the transfer falls to chance."""
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer

    texts, keys = verses
    labels, groups = bible_books(keys)
    train = ~held_out(groups)
    joint = TfidfVectorizer(sublinear_tf=True)
    pairs = joint.fit_transform([f"{e} {f}" for e, f, t in zip(texts["en"], texts["fr"], train) if t])
    svd = TruncatedSVD(128, random_state=0).fit(pairs)
    shared = {lang: svd.transform(joint.transform(texts[lang])) for lang in texts}
    result = transfer_matrix(shared, labels, groups, train_languages=["en"])
    assert len(result.classes) == 7 and result.train_rows + result.test_rows == len(keys)
    own, cross = result.accuracy[("en", "en")], result.accuracy[("en", "fr")]

    apart = {}
    for lang in texts:
        space = TfidfVectorizer(sublinear_tf=True).fit([t for t, s in zip(texts[lang], train) if s])
        words = space.transform([t for t, s in zip(texts[lang], train) if s])
        apart[lang] = TruncatedSVD(128, random_state=0).fit(words).transform(space.transform(texts[lang]))
    unaligned = transfer_matrix(apart, labels, groups, train_languages=["en"]).accuracy[("en", "fr")]
    print(f"{len(keys)} verses, 7 classes: en {own:.3f}, en->fr {cross:.3f}; spaces apart: en->fr {unaligned:.3f}")
    assert own > 0.6 and cross > own - 0.15, (own, cross)
    assert unaligned < 0.3, unaligned  # chance is 1/7 of balanced accuracy
