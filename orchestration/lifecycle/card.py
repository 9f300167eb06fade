"""A model's card: what it is for, what it saw, how it was trained, how well it does and where it does badly,
and how to make it again. Markdown, generated from what the model directory, its dataset's manifest and its
evaluation recorded; nothing in it is written by hand.

    text = model_card(model_dir, evaluation=metrics_json, manifest=manifest_json, name="interlingua", version="3")
    interlingua card --model runs/bible6-cpu/train/model        # printed
    interlingua card --version 3                                # the registered version's, as registered

Every registered version carries one (`champion.register_and_decide`): the version's description (the MLflow
UI renders it on the version's page) and `model_card.md` in its training run's artifacts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

WORST = 3  # the pairs named under the known limits
CARD_FILE = "model_card.md"


def model_card(
    model_dir: Path,
    *,
    evaluation: Mapping[str, Any] | None = None,
    manifest: Mapping[str, Any] | None = None,
    name: str | None = None,
    version: str | None = None,
    evaluated_on: str = "test",
) -> str:
    """The card of the (verified) model directory `model_dir`: `evaluation` is its evaluation's metrics.json
    record (None: not evaluated), `manifest` its dataset's manifest (None: not reachable)."""
    from model.args import trained_decoders
    from orchestration.adapters import model_dir as model_files

    model, meta = model_files.load(model_dir / model_files.MODEL_FILE)
    args = model.args
    # a model exported before config.yaml, lineage.json or progress.json were written has a card without them
    config = yaml.safe_load(_text(model_dir / "config.yaml") or "{}") or {}
    lineage = json.loads(_text(model_dir / "lineage.json") or "{}")
    if "model_sha256" not in lineage:
        from core.dataset import file_sha256

        lineage["model_sha256"] = file_sha256(model_dir / model_files.MODEL_FILE)
    progress = json.loads(_text(model_dir / "progress.json") or "{}")
    decoders = trained_decoders(args, meta)
    title = f"{name} v{version}" if name and version else config.get("name") or model_dir.name
    m, t = config.get("model", {}), config.get("train", {})
    lines = [
        f"# Model card: {title}",
        "",
        f"Sentence embeddings of {len(args.languages)} languages ({', '.join(args.languages)}): "
        f"{model.embedding_dim}-dimensional vectors in which a sentence and its translations lie close (cosine).",
        "",
        "## Intended use",
        "",
        "- Cross-lingual similarity search and bitext mining among the languages above "
        "(`interlingua search`, `embed`, `mine`; `serve`'s `POST /embed`).",
        "- Zero-shot transfer: a classifier trained on one language's vectors, applied to the others'.",
        (
            f"- Translation through the vector into {', '.join(decoders)} (`interlingua translate`)."
            if decoders
            else "- Not translation: its training taught no decoder (`train.decoders_for` teaches them on this "
            "space, without changing it)."
        ),
        "",
        "## Training data",
        "",
        f"- Dataset fingerprint `{lineage.get('dataset_fingerprint', 'unknown')}`, tokenizer (spm.model) sha256 "
        f"`{lineage.get('spm_sha256', 'unknown')}`, vocabulary {args.vocab_size:,}.",
    ]
    lines += _data_lines(manifest, config)
    lines += ["", "## Recipe", ""]
    lines += _recipe_lines(args, m, t, progress)
    lines += ["", f"## Results ({evaluated_on})", ""]
    lines += _result_lines(evaluation, args.languages)
    lines += ["", "## Known limits", ""]
    lines += _limit_lines(evaluation, args, config, decoders)
    lines += [
        "",
        "## Reproduce",
        "",
        f"Model file sha256 `{lineage.get('model_sha256', 'unknown')}`. Its configuration is `config.yaml` in "
        "the model directory (every key resolved); with that file and the same data:",
        "",
        "```sh",
        "interlingua run -c config.yaml        # prepare, train, evaluate, register",
        "interlingua evaluate -c config.yaml   # the results above",
        "```",
        "",
    ]
    return "\n".join(lines)


def _text(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.is_file() else None


def _data_lines(manifest: Mapping[str, Any] | None, config: Mapping[str, Any]) -> list[str]:
    sources = [s.get("name") or s.get("kind") for s in config.get("prepare", {}).get("sources", [])]
    if manifest is None:
        return [f"- Sources: {', '.join(map(str, sources)) or 'unknown'} (the dataset's manifest was not reachable)."]
    counts = manifest.get("counts", {})
    out = []
    for source, c in (counts.get("sources") or {}).items():
        split = c.get("out", {})
        out.append(
            f"- {source}: {c.get('in', 0):,} tuples read; {split.get('train', 0):,} train, "
            f"{split.get('dev', 0):,} dev, {split.get('test', 0):,} test"
        )
    dropped = counts.get("tuples", {}).get("dropped", {})
    if dropped:
        out.append("- Tuples dropped: " + ", ".join(f"{reason} {n:,}" for reason, n in sorted(dropped.items())))
    return out


def _recipe_lines(args, m: Mapping[str, Any], t: Mapping[str, Any], progress: Mapping[str, Any]) -> list[str]:
    encoder = "one encoder shared by every language" if args.shared_encoder else "one encoder per language"
    losses = [
        f"{label} {m.get(key)}"
        for key, label in (("ranking_weight", "ranking"), ("nmt_weight", "NMT"), ("distill_weight", "distillation"))
        if m.get(key)
    ]
    teacher = m.get("teacher")
    budget = [f"{t['max_minutes']} minutes" if t.get("max_minutes") else None]
    budget.append(f"{t['max_steps']:,} steps at most" if t.get("max_steps") else None)
    trained = (
        f"{progress['step']:,} steps in {progress['elapsed_s'] / 60:.1f} minutes"
        if "step" in progress and progress.get("elapsed_s")
        else "unknown"
    )
    frozen = t.get("decoders_for")
    return [
        f"- Encoder: {encoder}, {args.encoder_layers} BLSTM layer(s) of {args.encoder_hidden}, {args.pooling}-pooled.",
        f"- Losses: {', '.join(losses) or 'none recorded'}"
        + (f"; teacher {teacher}" if teacher and m.get("distill_weight") else "")
        + ".",
        f"- Budget: {', '.join(b for b in budget if b) or 'none set'}; trained {trained}.",
        *([f"- Decoders trained on the frozen encoders of {frozen}."] if frozen else []),
    ]


def _result_lines(evaluation: Mapping[str, Any] | None, languages: list[str]) -> list[str]:
    if not evaluation:
        return ["Not evaluated: `interlingua evaluate` fills this section."]
    pairs = evaluation.get("pairs", {})
    averages = evaluation.get("averages", {})
    out = [
        f"Similarity-search error over {evaluation.get('sentences', 0):,} sentences a language "
        f"(rows: the query's language; columns: the searched one), average {100 * averages.get('all', 0):.2f} %:",
        "",
        "| | " + " | ".join(languages) + " |",
        "|---|" + "---:|" * len(languages),
    ]
    for p in languages:
        cells = [
            "" if p == q or "error" not in pairs.get(f"{p}-{q}", {}) else f"{100 * pairs[f'{p}-{q}']['error']:.1f}"
            for q in languages
        ]
        out.append(f"| {p} | " + " | ".join(cells) + " |")
    for task, result in (evaluation.get("transfer") or {}).items():
        a = result.get("averages", {})
        out += [
            "",
            f"Zero-shot transfer, {task} ({len(result.get('classes', {}))} classes): balanced accuracy "
            f"{100 * a.get('own', 0):.1f} % in the training language, {100 * a.get('cross', a.get('own', 0)):.1f} % "
            f"in the others (the most lost: {100 * a.get('gap', 0):.1f} points).",
        ]
    translation = evaluation.get("translation") or {}
    if translation:
        chrf = [
            v["chrf"] for pair, v in translation.items() if "chrf" in v and pair.split("-")[0] != pair.split("-")[1]
        ]
        if chrf:
            out += [
                "",
                f"Translation through the vector: chrF {sum(chrf) / len(chrf):.1f} on average over {len(chrf)} pairs.",
            ]
    mining = evaluation.get("mining") or {}
    if not mining:
        out += ["", "Mining: not measured by this evaluation (`benchmarks/mine_gold.py` measures it)."]
    return out


def _limit_lines(evaluation, args, config: Mapping[str, Any], decoders: list[str]) -> list[str]:
    sources = [str(s.get("name") or s.get("kind")) for s in config.get("prepare", {}).get("sources", [])]
    out = [
        f"- Domains: it learned from the sources {', '.join(sources) or '(unknown)'} alone; other text (news, "
        "conversation, the web) is measured nowhere here.",
        "- Languages not listed above: "
        + (
            "its shared encoder embeds them in a test set (`evaluate.testsets`: unseen languages, measured "
            "there); every other command refuses them."
            if args.shared_encoder
            else "refused: its encoders are per language."
        ),
    ]
    pairs = (evaluation or {}).get("pairs", {})
    worst = sorted(((p, m) for p, m in pairs.items() if "error" in m), key=lambda item: -item[1]["error"])[:WORST]
    if worst:
        out.append(
            "- Its worst pairs: "
            + ", ".join(f"{pair} {100 * m.get('error', 0):.1f} %" for pair, m in worst)
            + " error."
        )
    if not decoders:
        out.append("- It cannot turn a vector back into text.")
    return out


def card_of_model(config, model: str | None) -> str:
    """`interlingua card --model DIR` (default: the run's model): its card, with the run's evaluation of the split
    when that evaluation is of this model file (its stored embeddings say which), and its dataset's manifest
    when it is reachable."""
    from core.location import Location
    from orchestration.adapters import model_dir as model_files

    local = model_files.fetch(model or model_files.default(config.train_dir))
    verified = model_files.verify(model_files.check(Path(local)))
    folder = Location.of(config.eval_dir) / config.evaluate.split
    evaluation = None
    stored = folder / "embeddings" / "manifest.json"
    if (folder / "metrics.json").exists() and stored.exists():
        if (stored.read_json().get("meta") or {}).get("model") == verified["model_sha256"]:
            evaluation = (folder / "metrics.json").read_json()
    manifest = Location.of(config.data_dir) / "manifest.json"
    return model_card(
        Path(local),
        evaluation=evaluation,
        manifest=manifest.read_json() if manifest.exists() else None,
        evaluated_on=config.evaluate.split,
    )


def card_of_version(config, version: str) -> str:
    """`interlingua card --version N`: the card registered with version N of the run's registered model.
    ConfigError (exit 2) when there is no such version, or it was registered without a card."""
    from orchestration.adapters import registry
    from orchestration.adapters.tracker import registered_name
    from orchestration.config import ConfigError

    name = registered_name(config)
    try:
        text = registry.version_card(config.tracking.uri, name, version)
    except LookupError as exc:
        raise ConfigError(f"--version {version}: {exc} in {config.tracking.uri}") from None
    if text is None:
        raise ConfigError(
            f"--version {version}: {name} v{version} was registered without a card; "
            f"`interlingua card --model <its model directory>` makes one"
        )
    return text if text.endswith("\n") else text + "\n"
