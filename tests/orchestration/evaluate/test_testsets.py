"""`evaluate.testsets` on real Bible text: line-aligned files and a pinned prepared split, embedded from
their text with each model's own tokenizer, logged apart, compared apart, and a champion decision on one."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from core.dataset import file_sha256, load_manifest
from core.schema import dump_yaml
from orchestration.adapters import tracking
from orchestration.adapters.tracker import TrackedRun
from orchestration.cli import main
from orchestration.config import ConfigError, load_config
from orchestration.evaluate import EvaluateError
from orchestration.evaluate.job import evaluate
from orchestration.evaluate.testsets import load_testset
from orchestration.lifecycle.champion import register_and_decide
from orchestration.lifecycle.compare import compare_runs
from tests.support.corpus import write_lines
from tests.support.runs import config_for, rotate_french, untrained_model_dir

RUTH = 8


def spec(**fields):
    return load_config(None, [f"evaluate.testsets=[{json.dumps(fields)}]"]).evaluate.testsets[0]


@pytest.fixture
def ruth(tmp_path, book_lines):
    """Ruth in French and English, one verse per line (85 lines each), and the lines."""
    lines = book_lines({"fr": "l", "en": "k"}, [RUTH])
    return {lang: str(write_lines(tmp_path / f"ruth.{lang}", text)) for lang, text in lines.items()}, lines


def test_line_aligned_files_become_tuples_and_an_empty_line_drops_its_tuple(ruth, tmp_path):
    files, lines = ruth
    testset = load_testset(spec(name="ruth", files=files), ["en", "fr", "es"])
    assert testset.languages == ["fr", "en"] and len(testset.table) == len(lines["fr"]) == 85
    assert testset.table["fr_text"][0].as_py() == lines["fr"][0] and testset.dropped == {}
    assert set(testset.identity["files"]) == {"fr", "en"} and len(testset.identity["files"]["fr"]["sha256"]) == 64
    write_lines(tmp_path / "gap.en", lines["en"][:3] + [""] + lines["en"][4:])
    gap = load_testset(spec(name="gap", files={"fr": files["fr"], "en": str(tmp_path / "gap.en")}), ["fr", "en"])
    assert len(gap.table) == 84 and gap.read == 85 and gap.dropped == {"empty": 1}
    assert lines["fr"][3] not in gap.table["fr_text"].to_pylist()


def test_bad_test_sets_are_refused_naming_the_file(ruth, tmp_path):
    files, lines = ruth
    write_lines(tmp_path / "short.en", lines["en"][:80])
    with pytest.raises(EvaluateError, match=r"line-aligned, but have .*ruth.fr 85 lines, .*short.en 80 lines"):
        load_testset(spec(name="t", files={"fr": files["fr"], "en": str(tmp_path / "short.en")}), ["fr", "en"])
    with pytest.raises(EvaluateError, match=r"the model knows \['fr', 'en'\], not \['de'\] \(its encoders are per"):
        load_testset(spec(name="t", files={"fr": files["fr"], "de": files["en"]}), ["fr", "en"])
    unseen = load_testset(spec(name="t", files={"fr": files["fr"], "de": files["en"]}), ["fr", "en"], shared=True)
    assert unseen.languages == ["fr", "de"] and len(unseen.table) == 85
    (tmp_path / "bad.en").write_bytes(b"fine\ncaf\xe9\n")
    with pytest.raises(EvaluateError, match=r"bad.en:2: not valid UTF-8"):
        load_testset(spec(name="t", files={"fr": files["fr"], "en": str(tmp_path / "bad.en")}), ["fr", "en"])
    with pytest.raises(EvaluateError, match="nope.en .* is not a file"):
        load_testset(spec(name="t", files={"fr": files["fr"], "en": str(tmp_path / "nope.en")}), ["fr", "en"])
    with pytest.raises(ConfigError, match="registry.decide_on: 'pinned' is not an evaluate.testsets name"):
        load_config(None, ["registry.decide_on=pinned"])


def test_a_test_set_line_over_the_models_limit_is_cut_and_counted(ruth, tmp_path, caplog):
    """A line of 1 MB in a test set: the model is given its first serve.max_sentence_chars characters (embedding
    it whole took minutes, deaf to Ctrl+C), and the log counts it; the tuple stays."""
    import logging

    from orchestration.config.stages import ServeConfig

    files, lines = ruth
    limit = ServeConfig().max_sentence_chars
    long = lines["en"][0] * (1_000_000 // len(lines["en"][0]))
    write_lines(tmp_path / "long.en", [long] + lines["en"][1:])
    with caplog.at_level(logging.WARNING):
        testset = load_testset(
            spec(name="long", files={"fr": files["fr"], "en": str(tmp_path / "long.en")}), ["fr", "en"]
        )
    assert len(testset.table) == 85 and testset.dropped == {}
    assert testset.table["en_text"][0].as_py() == long[:limit]
    assert testset.table["en_text"].to_pylist()[1:] == lines["en"][1:]
    assert any(f"1 of 85 sentences are longer than {limit} characters" in r.getMessage() for r in caplog.records)


def test_a_pinned_sets_texts_over_the_models_limit_are_cut_and_counted(small_dataset, tmp_path, caplog):
    """A pinned set's text longer than the model is given (a copy of the prepared books, its shard crafted and
    re-recorded in the manifest) is cut, as a files test set's line is, and counted in the log."""
    import logging

    import pyarrow as pa
    import pyarrow.parquet as pq

    from orchestration.config.stages import ServeConfig

    data = tmp_path / "data"
    shutil.copytree(small_dataset.data_dir, data)
    manifest = json.loads((data / "manifest.json").read_text())
    entry = manifest["splits"]["test"]["files"][0]
    table = pq.read_table(data / entry["path"])
    french = table["fr_text"].to_pylist()
    row = next(i for i, (fr, en) in enumerate(zip(french, table["en_text"].to_pylist())) if fr and en)
    limit = ServeConfig().max_sentence_chars
    french[row] = french[row] * (3 * limit // len(french[row]) + 1)
    table = table.set_column(table.schema.get_field_index("fr_text"), "fr_text", pa.array(french, pa.string()))
    pq.write_table(table, data / entry["path"])
    entry.update(sha256=file_sha256(data / entry["path"]), bytes=(data / entry["path"]).stat().st_size)
    (data / "manifest.json").write_text(json.dumps(manifest))
    with caplog.at_level(logging.WARNING):
        testset = load_testset(
            spec(name="p", dataset=str(data), fingerprint=manifest["fingerprint"], split="test"), ["fr", "en"]
        )
    texts = testset.table["fr_text"].to_pylist()
    assert max(len(t) for t in texts) == limit and french[row][:limit] in texts
    assert any(f"1 of {len(texts)} sentences are longer than {limit}" in r.getMessage() for r in caplog.records)


def test_a_pinned_dataset_is_refused_when_it_changed_or_is_not_pinned(small_dataset, tmp_path):
    data = Path(small_dataset.data_dir)
    current = load_manifest(data).dump()["fingerprint"]
    with pytest.raises(EvaluateError, match=f"pin the dataset with fingerprint: {current}"):
        load_testset(spec(name="p", dataset=str(data)), ["fr", "en"])
    with pytest.raises(EvaluateError, match=f"has fingerprint {current}, pinned 0123: the pinned set changed"):
        load_testset(spec(name="p", dataset=str(data), fingerprint="0123"), ["fr", "en"])
    with pytest.raises(EvaluateError, match=r"has no \['xx'\]"):
        load_testset(spec(name="p", dataset=str(data), fingerprint=current), ["fr", "xx"])
    pinned = load_testset(spec(name="p", dataset=str(data), fingerprint=current, split="dev"), ["fr", "en"])
    assert len(pinned.table) == 40 and pinned.identity["fingerprint"] == current


def config_with_testsets(small_dataset, tmp_path, files, *overrides, data=None):
    """Ruth's files as the test set `ruth` and a prepared dataset (`data`, else the session's) pinned as
    `pinned`, its test split; a run on that dataset."""
    data = data or small_dataset.data_dir
    pinned = {"name": "pinned", "dataset": str(data), "fingerprint": load_manifest(data).dump()["fingerprint"]}
    testsets = json.dumps([{"name": "ruth", "files": files}, pinned])
    return config_for(
        small_dataset, tmp_path, f"dataset_dir={data}", f"evaluate.testsets={testsets}", "evaluate.shards=2", *overrides
    )


def test_test_sets_are_evaluated_logged_compared_apart_from_the_split_and_refused_once_a_shard_changed(
    small_dataset, ruth, book_lines, tmp_path, local_ray, capsys, caplog
):
    """Test sets beside the split, one of a language the model never saw, then (what a test of its own asserted,
    on evaluations of its own of the same pinned set and split) a shard of the pinned dataset changed: the
    pinned set and the split are refused with one line naming the shard, and the stage cache does not answer
    for them once the manifest is re-recorded."""
    files, _ = ruth
    data = tmp_path / "pinned-data"  # a copy: its shard is changed at the end
    shutil.copytree(small_dataset.data_dir, data)
    config = config_with_testsets(small_dataset, tmp_path, files, data=data)
    model = untrained_model_dir(small_dataset, tmp_path / "model")
    split = evaluate(config, model_dir=model)
    pinned = evaluate(config, model_dir=model, testset="pinned")
    # the pinned split, re-tokenized from its text by the model's own sentencepiece model, gives exactly the
    # numbers of the split's stored token ids
    assert pinned.matrix == split.matrix and pinned.out_dir.name == "testset-pinned"
    assert pinned.data == f"{split.data}/test" and split.data == load_manifest(data).dump()["fingerprint"]
    result = evaluate(config, model_dir=model, testset="ruth")
    assert set(result.matrix) == {("fr", "en"), ("en", "fr")} and result.languages == ["fr", "en"]
    assert all(0 <= e <= 1 for e in result.matrix.values()) and result.data != split.data
    run = tracking.get_run(config.tracking.uri, result.run_id)
    assert run.data.tags["interlingua.testset"] == "ruth" and run.data.tags["interlingua.data"] == result.data
    assert run.data.metrics["eval/sentences"] == 85 and run.info.run_name.endswith("-eval-testset-ruth")
    assert evaluate(config, model_dir=model, testset="ruth").skipped  # the stage cache, per test set
    (tmp_path / "run.yaml").write_text(dump_yaml(config.to_dict()))
    assert main(["evaluate", "-c", str(tmp_path / "run.yaml"), "--model", str(model), "--testset", "ruth"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("test set ruth:") and f"(MLflow run {result.run_id})" in printed
    # a changed file is another test set: evaluated again
    shutil.copy(files["en"], tmp_path / "copy.en")
    with open(tmp_path / "copy.en", "a") as handle:
        handle.write("one more line\n")
    with open(tmp_path / "copy.fr", "w") as handle:
        handle.write(open(files["fr"]).read() + "une ligne de plus\n")
    changed = config_with_testsets(
        small_dataset, tmp_path, {"fr": str(tmp_path / "copy.fr"), "en": str(tmp_path / "copy.en")}, data=data
    )
    assert not evaluate(changed, model_dir=model, testset="ruth").skipped

    on_split = compare_runs(config)
    assert f"{len(on_split.splitlines()) - 3} evaluation runs" in on_split.splitlines()[0]
    assert "testset" not in on_split
    on_ruth = compare_runs(config, testset="ruth")
    assert "2 evaluation runs" in on_ruth and "testset-ruth" in on_ruth
    with pytest.raises(
        ConfigError,
        match="no evaluation runs on test set 'flores' .*evaluated: --testset pinned, --testset ruth, the split",
    ):
        compare_runs(config, testset="flores")
    # German, which the model never saw: its one shared encoder embeds it, and a warning names it
    german = write_lines(tmp_path / "ruth.de", book_lines({"de": "e"}, [RUTH])["de"])
    unseen = config_with_testsets(small_dataset, tmp_path, {"de": str(german), "en": files["en"]}, data=data)
    with caplog.at_level(logging.WARNING, logger="orchestration.evaluate.testsets"):
        measured = evaluate(unseen, model_dir=model, testset="ruth")
    assert set(measured.matrix) == {("de", "en"), ("en", "de")} and measured.languages == ["de", "en"]
    assert "['de'] never seen in training" in caplog.text and all(0 <= e <= 1 for e in measured.matrix.values())
    # Korean, whose script the vocabulary never saw: refused, not measured on unknown pieces
    korean = write_lines(tmp_path / "ruth.ko", book_lines({"ko": "n"}, [RUTH])["ko"])
    unreadable = config_with_testsets(small_dataset, tmp_path, {"ko": str(korean), "en": files["en"]}, data=data)
    with pytest.raises(EvaluateError, match=r"the model cannot tokenize ko: \d+ % of its characters are unknown"):
        evaluate(unreadable, model_dir=model, testset="ruth")

    # a shard of the pinned dataset changed: the pinned set and the split (both in the stage cache) refused
    shard = rotate_french(data)
    for testset in (["--testset", "pinned"], []):
        assert main(["evaluate", "-c", str(tmp_path / "run.yaml"), "--model", str(model), *testset]) == 2
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.startswith("interlingua")]
        assert len(lines) == 1 and "Traceback" not in err, err
        assert f"{shard}: sha256" in lines[0] and "differs" in lines[0]
    # a manifest re-recorded over the new shard, its fingerprint kept: the shard passes verification, and the
    # evaluation's cache key holds the sha256 verified, so the altered set is measured again
    manifest = json.loads((data / "manifest.json").read_text())
    manifest["splits"]["test"]["files"][0].update(sha256=file_sha256(shard), bytes=shard.stat().st_size)
    (data / "manifest.json").write_text(json.dumps(manifest))
    again = evaluate(config, model_dir=model, testset="pinned")
    assert not again.skipped and again.run_id != pinned.run_id and again.data == pinned.data


def noisy_copy(model_dir, out, seed: int):
    """The model directory with its weights moved a little: another model over the same tokenizer."""
    from model.model_file import load_model, save_model

    shutil.copytree(model_dir, out)
    model, meta = load_model(str(out / "model.safetensors"))
    torch.manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    save_model(model, str(out / "model.safetensors"), **meta.model_dump())
    return out


def test_the_champion_decision_on_a_pinned_test_set(small_dataset, ruth, tmp_path, local_ray):
    files, _ = ruth
    config = config_with_testsets(small_dataset, tmp_path, files, "registry.decide_on=pinned")
    uri = tracking.resolve_uri(config.tracking.uri)
    models = [untrained_model_dir(small_dataset, tmp_path / "a")]
    models.append(noisy_copy(models[0], tmp_path / "b", seed=1))
    decisions = []
    for i, model in enumerate(models):
        trained = SimpleNamespace(model_dir=model, run_id=tracking.start_run(uri, "exp", f"train-{i}", {}))
        parent = tracking.start_run(uri, "exp", f"pipeline-{i}", {})
        challenger = evaluate(config, model_dir=model, label=f"m{i}", testset="pinned")
        decisions.append(register_and_decide(config, "pin", f"sha{i}", trained, challenger, TrackedRun(uri, parent)))
        tags = tracking.get_run(uri, parent).data.tags
        assert tags["register.evaluation_set"] == "pinned"
        assert tags["register.evaluation_data"] == load_manifest(small_dataset.data_dir).dump()["fingerprint"] + "/test"
    first, second = decisions
    assert first.promoted and first.champion_error is None
    # the champion (model a) was measured again on the pinned set, as the challenger was
    champion_again = evaluate(config, model_dir=models[0], label="m0", testset="pinned")
    assert second.champion_error == champion_again.averages["all"]
    assert second.promoted == (second.challenger_error < second.champion_error)
