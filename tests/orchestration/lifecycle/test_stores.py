"""The stores `interlingua run` keeps in the champion's space (`registry.stores`, lifecycle/stores.py): on a
registry of its own (a sqlite store, versions made from model directories), real Bible text embedded by the
corpus job on the run's local Ray."""

from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import pytest

from core.dataset import file_sha256
from evaluation.store import StoredEmbeddings
from orchestration.adapters import model_dir as files
from orchestration.adapters import registry
from orchestration.config import load_config
from orchestration.lifecycle.champion import MODEL_TAG
from orchestration.lifecycle.stores import keep_stores
from tests.support.runs import other_weights, store_uri, untrained_model_dir

NAME = "stores"


@pytest.mark.ray
def test_stores_out_of_the_champions_space_are_embedded_again_and_a_killed_one_stays_whole(
    small_dataset, tmp_path, book_lines, local_ray, caplog
):
    """A store not written yet is embedded by the champion; in its space (its own model, or the one the registry
    tagged it compatible with) it is left alone; an incompatible champion makes it stale: a warning names the
    model that embedded it, and the champion embeds it again. A re-embedding killed midway leaves the stale
    store whole (a local folder's new output is staged beside it and swapped in whole; in a bucket the blocks are
    written in place and a rerun resumes from them, as `embed`'s own tests show), and the next run finishes it."""
    from mlflow.tracking import MlflowClient

    from orchestration.embedding.embedder import SentenceEmbedder

    uri = store_uri(tmp_path / "mlflow")
    client = MlflowClient(tracking_uri=uri)
    client.create_registered_model(NAME)
    first = untrained_model_dir(small_dataset, tmp_path / "v1" / "model")
    models = {"1": first}
    for version in ("2", "3"):  # two more models of other weights: v2 tagged compatible with v1, v3 not
        models[version] = other_weights(shutil.copytree(first, tmp_path / f"v{version}" / "model"))
    models["3"] = other_weights(models["3"])  # again: not v2's weights either

    def promote(version: str, tags: dict[str, str] | None = None) -> None:
        sha = file_sha256(models[version] / files.MODEL_FILE)
        made = client.create_model_version(NAME, str(models[version].parent), tags={MODEL_TAG: sha, **(tags or {})})
        assert str(made.version) == version
        registry.promote(uri, NAME, version)

    ruth = book_lines({"fr": "l"}, [8])["fr"]  # 85 verses
    (tmp_path / "ruth.fr.txt").write_text("".join(line + "\n" for line in ruth))
    out = tmp_path / "store"
    stores = f"[{{lang: fr, inputs: [{tmp_path / 'ruth.fr.txt'}], output: {out}, block_rows: 32}}]"
    config = load_config(None, [f"tracking.uri={uri}", f"registry.model_name={NAME}", f"registry.stores={stores}"])

    def embedded_by() -> str:
        return json.loads((out / "manifest.json").read_text())["meta"]["model"]["model_sha256"]

    promote("1")
    assert keep_stores(config, first) == [str(out)]  # not written yet
    assert embedded_by() == file_sha256(first / files.MODEL_FILE)
    assert keep_stores(config, first) == []  # in the champion's space: nothing embedded
    promote("2", {registry.COMPATIBLE_TAG: "v1"})
    assert keep_stores(config, models["2"]) == []  # v1's vectors compare with v2's
    promote("3")
    with caplog.at_level(logging.INFO, logger="orchestration.lifecycle.stores"):
        assert keep_stores(config, first) == [str(out)]  # v3's own model is downloaded from the registry
    stale = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and r.name.endswith(".stores")]
    assert len(stale) == 1 and f"embedded by model {file_sha256(first / files.MODEL_FILE)[:12]}" in stale[0]
    assert f"not in the space of {NAME} v3" in stale[0]
    assert embedded_by() == file_sha256(models["3"] / files.MODEL_FILE)
    stored = StoredEmbeddings.open(out)
    expected = SentenceEmbedder.load(models["3"]).embed(ruth, "fr")
    np.testing.assert_allclose(
        np.concatenate([rows for _, rows in stored.blocks("fr")]), expected, rtol=1e-5, atol=1e-6
    )

    # killed while embedding again for a fourth, incompatible champion, once two blocks are written
    models["4"] = other_weights(shutil.copytree(models["3"], tmp_path / "v4" / "model"))
    promote("4")
    from orchestration.embed import blocks as block_writer

    class Killed(Exception):
        pass

    real_save, saved = block_writer.save_input_block, []

    def dying(*args, **kwargs):
        if len(saved) == 2:
            raise Killed
        saved.append(real_save(*args, **kwargs))
        return saved[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(block_writer, "save_input_block", dying)
        with pytest.raises(Killed):
            keep_stores(config, models["4"])
    assert len(saved) == 2 and embedded_by() == file_sha256(models["3"] / files.MODEL_FILE)
    np.testing.assert_allclose(
        np.concatenate([rows for _, rows in StoredEmbeddings.open(out).blocks("fr")]), expected, rtol=1e-6
    )
    assert keep_stores(config, models["4"]) == [str(out)]  # the next run finishes it
    assert embedded_by() == file_sha256(models["4"] / files.MODEL_FILE)
    assert sorted(p.name for p in (out / "fr").iterdir()) == ["part-00000.npy", "part-00001.npy", "part-00002.npy"]


def test_a_store_whose_inputs_match_no_file_is_refused_before_any_work(tmp_path):
    from orchestration.embedding.inputs import CorpusError
    from orchestration.lifecycle.stores import check_stores

    stores = f"[{{lang: fr, inputs: [{tmp_path / 'missing.*.txt'}], output: {tmp_path / 'out'}}}]"
    config = load_config(None, [f"registry.stores={stores}"])
    with pytest.raises(CorpusError, match=r"registry.stores\[0\] \(fr\).inputs: .*missing.\*.txt: matches no file"):
        check_stores(config)
    (tmp_path / "missing.1.txt").write_text("une phrase\n")
    check_stores(config)
    assert not (tmp_path / "out").exists()


def test_a_store_over_a_users_file_or_its_own_inputs_or_twice_the_same_output_is_refused(tmp_path):
    from core.errors import UserError
    from orchestration.config import ConfigError
    from orchestration.lifecycle.stores import check_stores

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("une phrase\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("a user's file")

    def config(output, inputs=tmp_path / "in" / "a.txt", times=1):
        store = f"{{lang: fr, inputs: [{inputs}], output: {output}}}"
        return load_config(None, [f"registry.stores=[{', '.join([store] * times)}]"])

    with pytest.raises(UserError, match=r"registry.stores\[0\] \(fr\).output: .*\(notes.txt\).*move them away"):
        check_stores(config(tmp_path / "out"))
    assert (tmp_path / "out" / "notes.txt").read_text() == "a user's file"
    with pytest.raises(UserError, match=r"registry.stores\[0\] \(fr\).inputs"):
        check_stores(config(tmp_path / "in", tmp_path / "in" / "a.txt"))
    with pytest.raises(ConfigError, match="two stores write the same output"):
        config(tmp_path / "new", times=2)


def test_a_store_of_an_earlier_layout_is_named_in_a_warning_and_one_not_written_yet_is_embedded(
    tmp_path, monkeypatch, caplog
):
    """Which stores the champion embeds, and what it says first, without Ray (the embedding recorded): a
    store whose manifest records no model (embed's earlier layout) gets a warning saying so; a store not written
    yet an info line; both are embedded; without a champion, nothing is."""
    from mlflow.tracking import MlflowClient

    from orchestration.lifecycle import stores as kept_stores

    uri = store_uri(tmp_path / "mlflow")
    client = MlflowClient(tracking_uri=uri)
    client.create_registered_model(NAME)
    old = tmp_path / "old"
    old.mkdir()
    (old / "manifest.json").write_text(json.dumps({"fingerprint": "f", "lang": "fr", "model": "m", "blocks": []}))
    (tmp_path / "in.txt").write_text("une phrase\n")
    stores = f"[{{lang: fr, inputs: [{tmp_path / 'in.txt'}], output: {old}}}, " + (
        f"{{lang: fr, inputs: [{tmp_path / 'in.txt'}], output: {tmp_path / 'new'}}}]"
    )
    config = load_config(None, [f"tracking.uri={uri}", f"registry.model_name={NAME}", f"registry.stores={stores}"])
    embedded = []
    monkeypatch.setattr(kept_stores, "_embed", lambda config, spec, model_dir, said: embedded.append(spec.output))
    model = tmp_path / "model"
    model.mkdir()
    (model / files.MODEL_FILE).write_bytes(b"weights")
    assert keep_stores(config, model) == [] and embedded == []  # no champion yet
    client.create_model_version(NAME, str(model), tags={MODEL_TAG: file_sha256(model / files.MODEL_FILE)})
    registry.promote(uri, NAME, "1")
    with caplog.at_level(logging.INFO, logger="orchestration.lifecycle.stores"):
        assert keep_stores(config, model) == [str(old), str(tmp_path / "new")]
    assert embedded == [str(old), str(tmp_path / "new")]
    said = {r.levelname: r.getMessage() for r in caplog.records if r.name.endswith(".stores")}
    assert "its manifest records no model" in said["WARNING"] and str(old) in said["WARNING"]
    assert "not embedded yet" in said["INFO"] and str(tmp_path / "new") in said["INFO"]
