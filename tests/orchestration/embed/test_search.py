"""`interlingua embed` and `interlingua search` on a model trained on real Bible text; search refuses stored
embeddings changed after their manifest."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from orchestration.evaluate.job import evaluate
from tests.support.corpus import error_line


def test_embed_and_search_commands_on_a_trained_model(trained_run, small_dataset, tmp_path, verse, capsys, caplog):
    from orchestration.cli import main
    from orchestration.embedding.embedder import SentenceEmbedder

    config = trained_run.config()
    overrides = [f"run_dir={tmp_path / 'run'}", f"dataset_dir={small_dataset.data_dir}"]
    ruth = [verse("l", 8, 1, n) for n in (1, 2, 3)]  # Ruth 1:1-3 in French, real text
    (tmp_path / "fr.txt").write_text("\n".join(ruth) + "\n", encoding="utf-8")
    out = tmp_path / "fr.npy"
    assert main(["embed", *overrides, "-l", "fr", "-i", str(tmp_path / "fr.txt"), "-o", str(out)]) == 0
    assert "3 sentences (0 empty)" in capsys.readouterr().out
    vectors = np.load(out)
    embedder = SentenceEmbedder.load(Path(config.train_dir) / "model")
    assert vectors.shape == (3, embedder.model.embedding_dim)
    np.testing.assert_allclose(vectors, embedder.embed(ruth, "fr"), rtol=1e-5, atol=1e-6)
    # the same sentence as stored in the dataset (normalized, lowercased) embeds the same
    np.testing.assert_allclose(embedder.embed([ruth[0].upper()], "fr"), vectors[:1], rtol=1e-5, atol=1e-6)

    capsys.readouterr()
    assert main(["search", *overrides, "-q", ruth[0], "-l", "fr", "--in", "en,zh", "-k", "3"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "[en]" and printed[4] == "[zh]" and len(printed) == 8
    scores = [float(line.split()[0]) for line in printed[1:4]]
    assert scores == sorted(scores, reverse=True) and all(-1.0 <= s <= 1.0 for s in scores)
    assert main(["search", *overrides, "-q", ruth[0], "-l", "de"]) == 2

    # after `evaluate`, search reads the split's stored embeddings block by block: the same neighbours
    evaluate(config)
    capsys.readouterr()
    caplog.clear()  # the searches above embedded the split (and the CLI logs at INFO)
    with caplog.at_level(logging.INFO, logger="orchestration.embed.search"):
        assert main(["search", *overrides, "-q", ruth[0], "-l", "fr", "--in", "en,zh", "-k", "3"]) == 0
    assert not [r for r in caplog.records if r.name == "orchestration.embed.search"]  # nothing embedded here
    stored = capsys.readouterr().out.splitlines()
    assert [line.split(None, 1)[1:] for line in stored] == [line.split(None, 1)[1:] for line in printed]
    np.testing.assert_allclose([float(line.split()[0]) for line in stored[1:4]], scores, atol=2e-3)
    (tmp_path / "bad.txt").write_bytes(b"caf\xe9\n")
    assert main(["embed", *overrides, "-l", "fr", "-i", str(tmp_path / "bad.txt"), "-o", str(out)]) == 2

    # the stored embeddings changed after their manifest (issue 71): search refuses, one line naming the file
    emb = Path(config.eval_dir) / config.evaluate.split / "embeddings"
    query = ["search", *overrides, "-q", ruth[0], "-l", "fr", "--in", "en,zh", "-k", "3"]
    for name in ("rows/part-00000.parquet", "en/part-00000.npy"):
        changed, original = emb / name, (emb / name).read_bytes()
        if name.endswith(".parquet"):  # other sentences' texts beside the same keys
            table = pq.read_table(changed)
            texts = table.schema.get_field_index("en_text")
            pq.write_table(table.set_column(texts, "en_text", table["en_text"][::-1]), changed)
        else:  # other vectors of the same shape: the wrong neighbours
            np.save(changed, np.load(changed)[::-1].copy())
        capsys.readouterr()
        assert main(query) == 2
        line = error_line(capsys)
        assert f"{changed}: sha256 " in line and f"{emb / 'manifest.json'}" in line, line
        changed.write_bytes(original)
    assert main(query) == 0
