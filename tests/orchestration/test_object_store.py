"""Every stage with its run dir in an object store (a real S3 server, moto's): what each writes lands in
the bucket, nothing is written to a local folder named after the URI, and a rerun finds its work done."""
import pytest

from core import storage
from core.errors import Exit
from orchestration.cli import main
from tests.conftest import SMALL_BOOKS
from tests.orchestration.helpers import TINY

pytestmark = pytest.mark.slow


def test_prepare_train_evaluate_with_the_run_dir_in_a_bucket(s3_bucket, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # a URI taken for a local path would show up here as `s3:/...`
    run_dir = f"{s3_bucket}/runs/x"
    common = [f"run_dir={run_dir}", f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
              f"prepare.sources=[{{kind: bible, books: {SMALL_BOOKS}}}]", "prepare.split.dev_size=40",
              "prepare.split.test_size=40", "prepare.spm.vocab_size=2000", *TINY, "train.max_steps=20"]
    assert main(["prepare", *common]) == Exit.OK
    assert main(["train", *common]) == Exit.OK
    assert main(["evaluate", *common]) == Exit.OK
    out = capsys.readouterr().out
    assert f"model: {run_dir}/train/model" in out
    found = storage.files(run_dir)
    assert "data/manifest.json" in found and "data/spm.model" not in found  # the manifest names its attempt's
    assert {"train/run.json", "train/config.yaml", "train/model/model.pt", "train/model/spm.model",
            "train/model/lineage.json", "train/workers/rank-0.json"} <= set(found)
    assert any(f.startswith("train/ray/checkpoint_") and f.endswith("/state.pt") for f in found)
    assert {"eval/test/metrics.json", "eval/test/state.json", "eval/test/embeddings/manifest.json"} <= set(found)
    # nothing local but the SQLite tracking store and its artifact folder: no `s3:` folder, no stage output
    assert {p.name for p in tmp_path.iterdir()} <= {"mlflow.db", "mlartifacts"}
    # a rerun reads its states from the bucket: it trains and evaluates nothing
    assert main(["train", *common]) == Exit.OK and main(["evaluate", *common]) == Exit.OK
    assert storage.files(run_dir) == found
    assert storage.sha256(f"{run_dir}/train/model/model.pt") == storage.read_json(
        f"{run_dir}/train/model/lineage.json")["model_sha256"]


def test_prepare_reads_line_aligned_files_from_the_bucket(s3_bucket, tmp_path, monkeypatch, book_lines):
    monkeypatch.chdir(tmp_path)
    lines = book_lines({"en": "k", "fr": "l"}, SMALL_BOOKS[:3])
    for lang, texts in lines.items():
        storage.write_bytes(f"{s3_bucket}/corpus/bible.{lang}", ("\n".join(texts) + "\n").encode("utf-8"))
    data = f"{s3_bucket}/prepared"
    args = [f"dataset_dir={data}", f"run_dir={s3_bucket}/runs/y",
            f"prepare.sources=[{{kind: text, path: '{s3_bucket}/corpus/bible.{{lang}}', languages: [en, fr]}}]",
            "prepare.split.dev_size=20", "prepare.split.test_size=20", "prepare.spm.vocab_size=1000"]
    assert main(["prepare", *args]) == Exit.OK
    manifest = storage.read_json(f"{data}/manifest.json")
    read = {entry["path"]: entry["sha256"] for entry in manifest["inputs"]}  # the bytes it read, from the bucket
    assert read[f"{s3_bucket}/corpus/bible.fr"] == storage.sha256(f"{s3_bucket}/corpus/bible.fr")
    assert 0 < sum(manifest["splits"][s]["tuples"] for s in ("train", "dev", "test")) <= len(lines["en"])
    assert list(tmp_path.iterdir()) == []
    assert main(["prepare", *args, f"prepare.sources=[{{kind: text, path: '{s3_bucket}/corpus/none.{{lang}}', "
                 "languages: [en, fr]}]"]) == Exit.USER_ERROR
