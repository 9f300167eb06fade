"""Zero-shot cross-lingual transfer (LASER's XNLI and MLDoc protocol, Artetxe & Schwenk 2019): a classifier
trained on one language's labelled sentence vectors is applied unchanged to every language's vectors of other
sentences. A space where translations meet lets what was learned in one language serve all of them.

    task = TASKS["bible_books"]
    labels, groups = task.label([...keys...])           # per row: its class ("" unlabelled), its group
    result = transfer_matrix(vectors, labels, groups)    # {(train, test): balanced accuracy}, on held-out groups

Rows are split by group, never by row (a Bible chapter, a package): the sentences a classifier is tested on share
no group with those it learned from, so no near-copy crosses the split. The classifier is scikit-learn's
logistic regression (multinomial, L2); the score is balanced accuracy (the mean recall over classes), since
classes are uneven (the prophets hold far more verses than Revelation). Plain functions over arrays.
"""

from __future__ import annotations

import hashlib
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np


class TransferError(ValueError):
    """A task that cannot be learned or measured on these rows: none labelled, one class, a side left empty."""


# The Bible's books (the Protestant canon's order, as the corpus numbers them) in seven groups.
BOOK_GROUPS: tuple[tuple[str, range], ...] = (
    ("law", range(1, 6)),
    ("history", range(6, 18)),
    ("wisdom", range(18, 23)),
    ("prophets", range(23, 40)),
    ("gospels_acts", range(40, 45)),
    ("letters", range(45, 66)),
    ("revelation", range(66, 67)),
)
_GROUP_OF_BOOK = {book: name for name, books in BOOK_GROUPS for book in books}


def bible_books(keys: Sequence[str]) -> tuple[list[str], list[str]]:
    """Each key's book group and chapter ("bible:<book>:<chapter>:<verse>"); "" for a key that is not a verse."""
    labels, groups = [], []
    for key in keys:
        parts = key.split(":")
        group = ""
        if len(parts) == 4 and parts[0] == "bible" and parts[1].isascii() and parts[1].isdigit():
            group = _GROUP_OF_BOOK.get(int(parts[1]), "")
        labels.append(group)
        groups.append(":".join(parts[:3]) if group else "")
    return labels, groups


@dataclass(frozen=True)
class Task:
    name: str
    label: Callable[[Sequence[str]], tuple[list[str], list[str]]]  # keys -> (class per row, group per row)
    what: str


TASKS: dict[str, Task] = {
    "bible_books": Task("bible_books", bible_books, "Bible verses by book group (law, history, ..., revelation)"),
}


@dataclass(frozen=True)
class Transfer:
    """A task's result: balanced accuracy per (train language, test language), and what it was measured on."""

    accuracy: dict[tuple[str, str], float]
    classes: dict[str, int]  # class -> labelled rows
    train_rows: int
    test_rows: int

    def named(self) -> dict[str, float]:
        """{"en-fr": accuracy, ...}: the classifier trained on en, tested on fr."""
        return {f"{p}-{q}": v for (p, q), v in self.accuracy.items()}

    def gap(self, train: str) -> float:
        """The most a test language loses against the training language's own accuracy (points of 0-1)."""
        own = self.accuracy[(train, train)]
        return max(own - v for (p, _), v in self.accuracy.items() if p == train)


def held_out(groups: Sequence[str], test_share: float = 0.5) -> np.ndarray:
    """Which rows are tested (True) and which train the classifier (False), by a hash of their group: stable
    across runs, machines and the order of the rows."""
    cut = int(test_share * 2**32)
    seen: dict[str, bool] = {}
    for group in groups:
        if group not in seen:
            seen[group] = int.from_bytes(hashlib.blake2b(group.encode(), digest_size=4).digest(), "big") < cut
    return np.array([seen[g] for g in groups], dtype=bool)


def transfer_matrix(
    vectors: Mapping[str, np.ndarray],
    labels: Sequence[str],
    groups: Sequence[str],
    *,
    train_languages: Sequence[str] | None = None,
    test_share: float = 0.5,
    name: str = "the task",
) -> Transfer:
    """Train a classifier on each of `train_languages`' (default: every language's) labelled rows of the training
    groups, test it on every language's rows of the held-out groups. `vectors` {lang: (N, D)} are aligned on the
    rows of `labels` and `groups`; a row labelled "" is left out. TransferError when the rows cannot serve."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import balanced_accuracy_score

    labels_array = np.asarray(labels, dtype=object)
    n = len(labels_array)
    for lang, v in vectors.items():
        if len(v) != n:
            raise TransferError(f"{name}: {lang} has {len(v)} vectors for {n} labelled rows")
        if not np.isfinite(v).all():
            raise TransferError(f"{name}: {lang} has vectors that are not finite")
    labelled = labels_array != ""
    classes = Counter(labels_array[labelled].tolist())
    if not classes:
        raise TransferError(f"{name}: none of the {n} rows has a label")
    if len(classes) < 2:
        raise TransferError(f"{name}: every labelled row is of one class ({next(iter(classes))!r}): nothing to learn")
    test = held_out(groups, test_share) & labelled
    train = ~held_out(groups, test_share) & labelled
    for side, rows in (("training", train), ("test", test)):
        if len(set(labels_array[rows].tolist())) < 2:
            raise TransferError(
                f"{name}: its {side} groups hold {int(rows.sum())} labelled rows of fewer than 2 classes; "
                "more groups are needed"
            )
    accuracy = {}
    for p in train_languages if train_languages is not None else list(vectors):
        classifier = LogisticRegression(max_iter=2000, class_weight="balanced")
        classifier.fit(_unit(vectors[p][train]), labels_array[train])
        for q in vectors:
            predicted = classifier.predict(_unit(vectors[q][test]))
            with warnings.catch_warnings():  # a class predicted that the held-out groups lack: a miss, as scored
                warnings.simplefilter("ignore", UserWarning)
                accuracy[(p, q)] = float(balanced_accuracy_score(labels_array[test], predicted))
    return Transfer(accuracy, dict(sorted(classes.items())), int(train.sum()), int(test.sum()))


def _unit(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
