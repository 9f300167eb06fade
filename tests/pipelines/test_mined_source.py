"""`kind: mined`: the pairs `interlingua mine` wrote, read back as a `prepare` source (the loop closes)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orchestration.config import load_config
from pipelines.errors import SourceError
from pipelines.sources import BELOW_MIN_SCORE, plan_reads, read_task
from tests.support.runs import mined_manifest


@pytest.fixture
def mined(tmp_path, book_lines):
    """A mining output folder: Ruth's verses as fr-en pairs with falling scores, and its manifest."""
    lines = book_lines({"fr": "l", "en": "k"}, [8])
    n = len(lines["fr"])
    scores = [1.3 - 0.3 * i / n for i in range(n)]  # 1.3 down to 1.0
    pq.write_table(
        pa.table(
            {
                "fr_text": lines["fr"],
                "en_text": lines["en"],
                "score": pa.array(scores, pa.float32()),
                "fwd_rank": [0] * n,
                "bwd_rank": [0] * n,
            }
        ),
        tmp_path / "pairs-fr-en.parquet",
    )
    mined_manifest(tmp_path, {"pairs-fr-en.parquet": ["fr", "en"]})
    return tmp_path, scores


def mined_config(folder, *overrides):
    return load_config(
        None,
        [
            f"prepare.sources=[{{kind: mined, path: '{folder}', languages: [fr, en], min_score: 1.15}}]",
            "prepare.output.read_chunk_lines=30",
            *overrides,
        ],
    ).prepare


def test_mined_pairs_are_read_with_the_low_scores_counted_as_dropped(mined):
    folder, scores = mined
    plan = plan_reads(mined_config(folder))
    assert plan.records == len(scores) and len(plan.tasks) == -(-len(scores) // 30)
    records = [r for task in plan.tasks for r in read_task(task)]
    kept = [(k, r) for k, r in records if r != BELOW_MIN_SCORE]
    assert len(kept) == sum(s >= 1.15 for s in scores) and len(records) == len(scores)
    assert kept[0] == ("mined0:1", {"fr": records[0][1]["fr"], "en": records[0][1]["en"]})
    assert kept[0][1]["fr"].startswith("Du temps des juges")  # Ruth 1:1 in French, the best-scored pair


def test_a_changed_or_unfinished_mining_output_is_refused(mined):
    folder, _ = mined
    with pytest.raises(SourceError, match="no mined pair of \\['fr', 'de'\\]"):
        plan_reads(
            load_config(None, [f"prepare.sources=[{{kind: mined, path: '{folder}', languages: [fr, de]}}]"]).prepare
        )
    (folder / "pairs-fr-en.parquet").write_bytes(b"changed")
    with pytest.raises(SourceError, match="changed after mining"):
        plan_reads(mined_config(folder))
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, "pairs": {"fr-en": {"file": "pairs-fr-en.parquet"}}}))
    with pytest.raises(SourceError, match=r"manifest.json: not a mining manifest \(pairs.fr-en.rows: Field required"):
        plan_reads(mined_config(folder))
    (folder / "manifest.json").unlink()
    with pytest.raises(SourceError, match="not a finished `interlingua mine` output"):
        plan_reads(mined_config(folder))


@pytest.mark.beam
def test_prepare_on_mined_pairs_accounts_for_every_pair(mined, tmp_path):
    from pipelines.prepare import run_prepare
    from pipelines.runners import pipeline_options

    folder, scores = mined
    config = mined_config(folder, "prepare.split.dev_size=5", "prepare.split.test_size=5", "prepare.spm.vocab_size=300")
    result = run_prepare(config, tmp_path / "data", options=pipeline_options([]))
    tuples = result.manifest.dump()["counts"]["tuples"]
    assert tuples["in"] == len(scores)
    assert tuples["dropped"][BELOW_MIN_SCORE] == sum(s < 1.15 for s in scores)
    assert sum(tuples["out"].values()) + sum(tuples["dropped"].values()) == len(scores)
