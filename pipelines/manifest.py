"""A prepared dataset's manifest, from what the Beam job wrote into its staging area and the counts it summed:
each split's shards with their rows, size and sha256 (an empty shard written where no row fell), the BPE model,
the counts once they add up (`pipelines.accounting`), the inputs' fingerprints and the resolved config."""

from __future__ import annotations

from typing import Any

from core import dataset, dataset_writer
from core.output import Staging
from pipelines import sources
from pipelines.accounting import check_accounting, check_not_empty, check_splits_not_empty, count_table
from pipelines.config import PrepareConfig
from pipelines.decontaminate import REASONS
from pipelines.encode import SAMPLE_STAT
from pipelines.split import check_held_out


def shard_files(staged: Staging, split: str, count: int, languages: list[str]) -> list[dataset.ShardFile]:
    """Every shard of a split (an empty one written where no row fell), with its checksum."""
    files = []
    for i in range(count):
        name = dataset_writer.shard_name(split, i, count)
        location = staged.join(name)
        if not location.exists():
            dataset_writer.write_shard(location.text, [], languages)
        files.append(
            dataset.ShardFile(
                path=staged.prefix + name,
                rows=dataset_writer.shard_rows(location.text),
                bytes=location.size(),
                sha256=location.sha256(),
            )
        )
    return files


def build_manifest(
    config: PrepareConfig,
    staged: Staging,
    stats: dict[str, int],
    plan: sources.SourcePlan,
    print_: str,
    resolved: dict[str, Any] | None,
) -> dataset.DatasetManifest:
    """The manifest of the dataset staged at `staged`, once the job's summed `stats` add up (the accounting's
    checks: EmptyDataError, HeldOutError...) and every shard holds the rows the job encoded (RuntimeError)."""
    import sentencepiece as spm

    counts = count_table(stats, config.languages)
    check_not_empty(counts, sample=stats.get(SAMPLE_STAT, 0))  # first: it names the drops that caused it
    check_accounting(counts)
    dropped = counts["tuples"]["dropped"]
    check_held_out(config.split, counts["tuples"]["out"], {s: dropped.get(r, 0) for s, r in REASONS.items()})
    check_splits_not_empty(counts)
    shards = {
        "train": config.output.train_shards,
        "dev": config.output.heldout_shards,
        "test": config.output.heldout_shards,
    }
    splits = {}
    for split, count in shards.items():
        files = shard_files(staged, split, count, config.languages)
        splits[split] = dataset.SplitFiles(tuples=sum(f.rows for f in files), files=files)
        if splits[split].tuples != counts["tuples"]["out"][split]:
            raise RuntimeError(
                f"{split}: shards hold {splits[split].tuples} rows, {counts['tuples']['out'][split]} were encoded"
            )
    model = staged.join(dataset.SPM_MODEL)
    if not model.exists():
        raise RuntimeError(
            f"{model}: no BPE model was trained: no training sentence was left after cleaning, "
            "dedup and the split; check prepare.sources, prepare.filters and prepare.split"
        )
    sp = spm.SentencePieceProcessor(model_proto=model.read_bytes())
    return dataset.DatasetManifest(
        fingerprint=print_,
        languages=config.languages,
        splits=splits,
        table_schema=dataset_writer.schema(config.languages).to_string(show_schema_metadata=False).splitlines(),
        spm=dataset.SpmFiles(
            model=staged.prefix + dataset.SPM_MODEL,
            vocab=staged.prefix + dataset.SPM_VOCAB,
            vocab_size=sp.get_piece_size(),
            sha256=model.sha256(),
            sample_sentences=stats.get(SAMPLE_STAT, 0),
        ),
        counts=dataset.Counts.model_validate(counts),
        inputs=plan.fingerprints,
        config=resolved if resolved is not None else {"prepare": config.model_dump(mode="json")},
    )
