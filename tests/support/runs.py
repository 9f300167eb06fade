"""Runs for the tests: tiny run configs on the prepared Bible books, their checkpoints, an untrained model."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from orchestration.config import Config, load_config

# a model and a cadence small enough for a test
TINY = [
    "model.embed_dim=16",
    "model.encoder_hidden=16",
    "model.decoder_hidden=16",
    "runtime.log_every_steps=5",
    "train.eval_every_steps=10",
    "runtime.checkpoint_every_steps=10",
    "train.dev_max_sentences=40",
]
RETUNED = ["train.lr=0.003", "model.ranking_weight=1.0"]  # another model/train config: a new challenger


EMPTY_STORE = "empty-mlflow.db"


def config_for(small_dataset: Config, tmp_path: Path, *overrides: str) -> Config:
    """A run on the session's prepared dataset (`small_dataset`), with its own run dir and MLflow store (an
    empty one, `seed_store`, unless the test's folder holds one)."""
    return load_config(
        None,
        [
            f"run_dir={tmp_path / 'run'}",
            f"dataset_dir={small_dataset.data_dir}",
            f"tracking.uri={store_uri(tmp_path, near=Path(small_dataset.data_dir).parent)}",
            "prepare.spm.vocab_size=2000",
            *TINY,
            *overrides,
        ],
    )


def store_uri(folder: Path, near: Path | None = None) -> str:
    """The URI of an MLflow sqlite store in `folder`, seeded empty unless one is there (`seed_store`, its
    template in `near`, else beside `folder`)."""
    seed_store(folder / "mlflow.db", near or folder.parent)
    return f"sqlite:///{folder / 'mlflow.db'}"


def seed_store(db: Path, near: Path) -> None:
    """An empty MLflow sqlite store at `db`, unless something is there: a copy of one made once in `near` (a
    folder of the test run's). A new store otherwise runs MLflow's schema migrations, one by one, about 1.2
    CPU-seconds each time; the product's creation of a store is what the tests of their own `tracking.uri`
    exercise."""
    if db.exists():
        return
    template = near / EMPTY_STORE
    if not template.exists():
        from mlflow.tracking import MlflowClient
        from mlflow.utils import logging_utils

        partial = near / f".{EMPTY_STORE}.{os.getpid()}"
        # MLflow's migration lines go to the stderr of the test that seeds the template first: a test that
        # counts its command's lines (mine's one-line errors) failed when it was that test
        logging_utils.disable_logging()
        try:
            MlflowClient(tracking_uri=f"sqlite:///{partial}").search_experiments(max_results=1)
        finally:
            logging_utils.enable_logging()
        os.replace(partial, template)
    db.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, db)


def checkpoints(train_dir: Path) -> list[dict]:
    """Progress of the checkpoints Ray has registered (those a restart resumes from), by step."""
    found = []
    try:
        folder = train_dir / json.loads((train_dir / "run.json").read_text()).get("ray_dir", "ray")  # train.folders
        snapshot = json.loads((folder / "checkpoint_manager_snapshot.json").read_text())
        for result in snapshot["checkpoint_results"]:
            found.append(json.loads((folder / result["checkpoint_dir_name"] / "progress.json").read_text()))
    except (OSError, json.JSONDecodeError, KeyError):
        pass  # not written yet, or being replaced
    return sorted(found, key=lambda p: p["step"])


def untrained_model_dir(small_dataset: Config, folder: Path, **meta) -> Path:
    """A model directory (`orchestration.adapters.model_dir`) holding an untrained shared-encoder model over the
    dataset's sentencepiece vocabulary: what `interlingua train` exports, without the training; `meta`: more of
    its file's metadata (`model.args.ModelMeta`, e.g. `decoders=[]`)."""
    import torch

    from core.dataset import SPM_MODEL, load_manifest
    from core.schema import dump_yaml
    from model.model_file import save_model
    from model.nmt import MultilingualNMT
    from orchestration.adapters import model_dir as files

    manifest = load_manifest(small_dataset.data_dir)
    torch.manual_seed(0)
    model = MultilingualNMT(
        languages=manifest.languages,
        vocab_size=manifest.spm.vocab_size,
        embed_dim=16,
        encoder_hidden=16,
        decoder_hidden=16,
        shared_encoder=True,
    )
    folder.mkdir(parents=True, exist_ok=True)
    save_model(model, str(folder / files.MODEL_FILE), step=0, dev_error=None, **meta)
    shutil.copy(Path(small_dataset.data_dir) / SPM_MODEL, folder / files.SPM_FILE)
    (folder / files.CONFIG_FILE).write_text(dump_yaml(small_dataset.to_dict()))
    return folder


def rotate_french(data, rows: int = 20):
    """Rewrite the test shard of the dataset at `data` with the French text of its first `rows` rows moved
    one row on (misaligned translations), leaving manifest.json as it was; the shard's path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from core.dataset import load_manifest

    shard = data / load_manifest(data).dump()["splits"]["test"]["files"][0]["path"]
    table = pq.read_table(shard)
    french = table["fr_text"].to_pylist()
    french[:rows] = french[1:rows] + french[:1]
    table = table.set_column(table.schema.get_field_index("fr_text"), "fr_text", pa.array(french, pa.string()))
    pq.write_table(table, shard, compression="zstd")
    return shard


def other_weights(model_dir: Path) -> Path:
    """The same model directory with other weights (another seed, its metadata kept): a second model whose
    embeddings differ. Its lineage.json, if any, no longer matches: record it again where it must."""
    import torch

    from model.model_file import save_model
    from orchestration.adapters import model_dir as files

    model, meta = files.load(model_dir / files.MODEL_FILE)
    torch.manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.5 * torch.randn_like(parameter))
    save_model(model, str(model_dir / files.MODEL_FILE), **meta.model_dump())
    return model_dir


def mined_manifest(folder: Path, files: dict[str, list[str]]) -> None:
    """A mining output's manifest.json in `folder` naming the pair files `files` (name -> [src, trg]) already
    there, as `interlingua mine` writes it (`core.mined`), with made-up counts."""
    from core import mined, storage
    from core.dataset import file_sha256

    pairs = {
        "-".join(languages): mined.MinedPair(
            file=name,
            rows=pq_rows(folder / name),
            sha256=file_sha256(folder / name),
            languages=languages,
            index="flat",
            candidates=0,
            threshold=1.0,
            dropped={},
            gold=None,
            kept_per_threshold={},
        )
        for name, languages in files.items()
    }
    storage.write_bytes(
        storage.join(folder, mined.MANIFEST),
        mined.manifest_bytes(
            mined.MinedManifest(
                model=mined.MinedModel(model="/models/m", model_sha256="0" * 64),
                inputs={
                    lang: mined.InputCounts(read=0, distinct=0, dropped={})
                    for langs in files.values()
                    for lang in langs
                },
                pairs=pairs,
                config={},
            ),
        ),
    )


def pq_rows(path: Path) -> int:
    """The rows of a Parquet file; 0 for a file that is not one (a test's stand-in bytes)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path).metadata.num_rows
    except pa.ArrowInvalid:
        return 0
