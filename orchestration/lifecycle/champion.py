"""The champion decision: register the challenger, measure the champion on the same data, promote or not.

The trained model is logged as an MLflow pyfunc model and registered under
`registry.model_name`, tagged with its lineage (dataset fingerprint, tokenizer
sha256). The version holding the alias `champion` is evaluated again on the
same, current evaluation set (the run's split, or the test set
`registry.decide_on`, e.g. a pinned one): the same sentences, fed as token ids
of its own tokenizer (re-encoded, with a warning, when the dataset's is
another one), and the challenger takes the alias
only when its average error is lower by more than `registry.min_improvement`
and, when `registry.max_pair_regression` is set, no language pair is worse
than the champion's by more than that budget (`decide`). The errors, the
rule's parameters, the pairs that blocked the promotion and the decision are
logged to the pipeline run.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass

from orchestration.adapters import registry
from orchestration.adapters.tracker import TrackedRun
from orchestration.config import Config
from orchestration.lifecycle import packaging

log = logging.getLogger(__name__)

MODEL_TAG = "interlingua.model_sha256"  # a registered version's model file, to find it again
SPM_TAG, DATASET_TAG = "interlingua.spm_sha256", "interlingua.dataset_fingerprint"  # its lineage
Pair = tuple[str, str]  # (query language, searched language), as in EvalResult.matrix
# Errors are sentence counts over the split size: compare them with a tolerance far below one sentence, so
# that a difference exactly at the margin is not decided by float rounding (0.20 - 0.05 < 0.15 in floats).
TOLERANCE = 1e-9
MAX_LISTED_PAIRS = 10  # in the decision message (all of them go to the run's metrics)
CROSS_TAG = "interlingua.cross_version_error"  # its queries among the old model's vectors (train.compatible_with)
MAX_TAG_CHARS = 5000  # MLflow caps tag values (8,000 characters in MLflow 3); keep well under


@dataclass(frozen=True)
class PairRegression:
    """A language pair on which the challenger is worse than the champion by more than the budget."""

    pair: Pair
    challenger_error: float
    champion_error: float

    @property
    def delta(self) -> float:
        """How much worse the challenger is, as a fraction (0.05 = 5 points)."""
        return self.challenger_error - self.champion_error

    @property
    def name(self) -> str:
        return f"{self.pair[0]}-{self.pair[1]}"

    def __str__(self) -> str:
        return f"{self.name} {100 * self.challenger_error:.2f}% vs {100 * self.champion_error:.2f}%"


@dataclass(frozen=True)
class Verdict:
    """The rule's outcome: promoted when better on average and no pair regresses beyond the budget."""

    better: bool  # the average error beats the champion's by more than min_improvement
    blocking: tuple[PairRegression, ...] = ()  # the pairs beyond the budget, worst first

    @property
    def promoted(self) -> bool:
        return self.better and not self.blocking


@dataclass
class Decision:
    promoted: bool
    message: str
    version: str
    challenger_error: float
    champion_error: float | None  # None when there was no champion
    blocking: tuple[PairRegression, ...] = ()


def beats(challenger_error: float, champion_error: float, min_improvement: float) -> bool:
    """The average rule: the challenger's average error is lower than the champion's by more than
    `min_improvement` (errors as fractions; a tie keeps the champion)."""
    return challenger_error < champion_error - min_improvement - TOLERANCE


def pair_regressions(
    challenger: Mapping[Pair, float], champion: Mapping[Pair, float], max_pair_regression: float | None
) -> tuple[PairRegression, ...]:
    """The pairs on which the challenger's error exceeds the champion's by more than `max_pair_regression`,
    worst first; none when the budget is None. A pair the champion was measured on and the challenger was
    not (a language it dropped) counts as 100 % error for the challenger; pairs only the challenger has
    cannot regress."""
    if max_pair_regression is None:
        return ()
    found = [PairRegression(pair, challenger.get(pair, 1.0), error) for pair, error in champion.items()]
    worse = [r for r in found if r.delta > max_pair_regression + TOLERANCE]
    return tuple(sorted(worse, key=lambda r: (-r.delta, r.pair)))


def decide(
    *,
    challenger_error: float,
    champion_error: float,
    challenger_matrix: Mapping[Pair, float],
    champion_matrix: Mapping[Pair, float],
    min_improvement: float,
    max_pair_regression: float | None,
) -> Verdict:
    """Both rules on both models' errors measured on the same split (matrices: {(src, tgt): error}).
    The pairs are checked even when the average already fails, so that the log says every reason."""
    return Verdict(
        beats(challenger_error, champion_error, min_improvement),
        pair_regressions(challenger_matrix, champion_matrix, max_pair_regression),
    )


def explain(
    verdict: Verdict,
    *,
    challenger: str,
    champion: str,
    challenger_error: float,
    champion_error: float,
    min_improvement: float,
    max_pair_regression: float | None,
) -> str:
    """The reason, for people: both averages, the margin, and the blocking pairs with both errors."""
    reason = (
        f"challenger {challenger} {100 * challenger_error:.2f}% vs champion {champion} "
        f"{100 * champion_error:.2f}% (needs {100 * min_improvement:.2f} points better)"
    )
    if verdict.blocking:
        if max_pair_regression is None:  # `pair_regressions` finds no pair without a budget
            raise ValueError("a verdict with blocking pairs comes from a max_pair_regression; none was given")
        listed = ", ".join(str(r) for r in verdict.blocking[:MAX_LISTED_PAIRS])
        more = len(verdict.blocking) - MAX_LISTED_PAIRS
        reason += (
            f"; {len(verdict.blocking)} pair(s) worse than the champion's by more than "
            f"{100 * max_pair_regression:.2f} points (challenger vs champion): {listed}"
            + (f" and {more} more" if more > 0 else "")
        )
    return reason


def register_and_decide(config: Config, name: str, sha: str, trained, challenger, parent: TrackedRun) -> Decision:
    """Register `trained` (a TrainResult) evaluated as `challenger` (an EvalResult on the split, or on the
    test set `registry.decide_on`) in the store of the pipeline run `parent`; promote it when `decide` says so
    against the champion re-evaluated on the same data (RuntimeError if that data's fingerprint differs: numbers
    on different inputs). The decision is logged to `parent`."""
    from orchestration.adapters import model_dir as model_files
    from orchestration.evaluate.job import evaluate

    uri = parent.uri
    local = model_files.fetch(trained.model_dir)  # a URI's model: a verified copy on this host
    dim = model_files.load(local / model_files.MODEL_FILE)[0].embedding_dim
    lineage = model_files.verify(local)
    info = packaging.log_model(uri, trained.run_id, local, dim)
    version = registry.register_model(
        uri,
        info.model_uri,
        name,
        {
            MODEL_TAG: sha,
            "eval.xsim_error": f"{challenger.averages['all']:.6f}",
            "train_run_id": trained.run_id,
            SPM_TAG: lineage["spm_sha256"],
            DATASET_TAG: lineage.get("dataset_fingerprint", "unknown"),
        },
    )
    try:  # registered, the version must reach its decision: its card is made and attached at best
        _attach_card(config, uri, name, version, trained.run_id, local, challenger)
    except Exception as exc:  # noqa: BLE001
        log.warning(
            "%s v%s: its model card was not attached (%s); `interlingua card --model` makes it", name, version, exc
        )
    _tag_compatibility(config, uri, name, version, challenger, lineage)
    challenger_error, champion_error = challenger.averages["all"], None
    min_improvement, max_pair_regression = config.registry.min_improvement, config.registry.max_pair_regression
    current = registry.champion(uri, name)
    if current is None:
        verdict, reason = Verdict(better=True), "no champion yet"
    else:
        with tempfile.TemporaryDirectory(prefix="champion-") as tmp:
            champion_dir = registry.download_model_dir(uri, name, current.version, tmp)
            # the same sentences as the challenger's, as token ids of the champion's own tokenizer
            champion = evaluate(
                config,
                model_dir=champion_dir,
                label=f"champion-v{current.version}",
                parent_run_id=parent.id,
                testset=config.registry.decide_on,
                reencode=True,
            )
        if champion.data != challenger.data:
            raise RuntimeError(
                f"the champion was measured on data {champion.data}, the challenger on "
                f"{challenger.data}: not comparable; rerun"
            )
        champion_error = champion.averages["all"]
        verdict = decide(
            challenger_error=challenger_error,
            champion_error=champion_error,
            challenger_matrix=challenger.matrix,
            champion_matrix=champion.matrix,
            min_improvement=min_improvement,
            max_pair_regression=max_pair_regression,
        )
        reason = explain(
            verdict,
            challenger=f"v{version}",
            champion=f"v{current.version}",
            challenger_error=challenger_error,
            champion_error=champion_error,
            min_improvement=min_improvement,
            max_pair_regression=max_pair_regression,
        )
    if verdict.promoted:
        registry.promote(uri, name, version)
    log_decision(
        parent,
        verdict,
        challenger_error=challenger_error,
        champion_error=champion_error,
        min_improvement=min_improvement,
        max_pair_regression=max_pair_regression,
    )
    parent.set_tags(
        {
            "register.evaluation_set": config.registry.decide_on or config.evaluate.split,
            "register.evaluation_data": challenger.data,
        }
    )
    message = f"{'promoted' if verdict.promoted else 'not promoted'} {name} v{version}: {reason}"
    log.info(message)
    return Decision(verdict.promoted, message, version, challenger_error, champion_error, verdict.blocking)


def _tag_compatibility(
    config: Config, uri: str, name: str, version: str, challenger, lineage: Mapping[str, str] | None = None
) -> bool | None:
    """For a version trained with `train.compatible_with`: its cross-version error (`evaluate`'s, its queries among
    the old model's vectors of the split) as a tag, and `interlingua.compatible_with: vN` (the old model's
    version, or its sha256 when it was never registered) when that error is within `registry.compatible_margin`
    of its own; a warning saying the old vectors need embedding again otherwise. None: no check was made."""
    from core.location import Location

    metrics = Location.of(challenger.out_dir) / "metrics.json"
    crossed = (metrics.read_json() if metrics.exists() else {}).get("cross_version")
    if not crossed:
        if (lineage or {}).get("compatible_with"):  # evaluated on a test set (registry.decide_on): no check there
            log.warning(
                "%s v%s: trained compatible with %s, but %s holds no cross-version check (it is made on the run's "
                "split): no compatibility tag",
                name,
                version,
                (lineage or {})["compatible_with"],
                challenger.out_dir,
            )
        return None
    old = registry.find_version(uri, name, MODEL_TAG, crossed["old_sha256"])
    old_name = f"v{old}" if old else f"the model {crossed['old_sha256'][:12]}"
    own = float(crossed.get("own_error", challenger.averages["all"]))  # on the same languages and tuples
    cross, margin = float(crossed["avg_error"]), config.registry.compatible_margin
    compatible = cross - own <= margin + TOLERANCE
    tags = {CROSS_TAG: f"{cross:.6f}"}
    if compatible:
        tags[registry.COMPATIBLE_TAG] = f"v{old}" if old else crossed["old_sha256"]
    registry.set_version_tags(uri, name, version, tags)
    said = (
        f"{name} v{version}: its queries among {old_name}'s vectors err on {100 * cross:.2f} %, "
        f"{100 * own:.2f} % among its own (registry.compatible_margin {100 * margin:.1f} points)"
    )
    if compatible:
        log.info("%s: compatible with %s", said, old_name)
    else:
        log.warning("%s: not compatible; vectors stored with %s need embedding again with it", said, old_name)
    return compatible


def _attach_card(config: Config, uri: str, name: str, version: str, run_id: str, local, challenger) -> None:
    """The version's model card (`lifecycle.card`), from the model, its dataset's manifest and the evaluation it
    was registered on."""
    from core.location import Location
    from orchestration.lifecycle.card import CARD_FILE, model_card

    metrics = Location.of(challenger.out_dir) / "metrics.json"
    evaluation = metrics.read_json() if metrics.exists() else None
    manifest = Location.of(config.data_dir) / "manifest.json"
    card = model_card(
        local,
        evaluation=evaluation,
        manifest=manifest.read_json() if manifest.exists() else None,
        name=name,
        version=version,
        evaluated_on=config.registry.decide_on or config.evaluate.split,
    )
    registry.attach_card(uri, name, version, run_id, card, CARD_FILE)


def log_decision(
    run: TrackedRun,
    verdict: Verdict,
    *,
    challenger_error: float,
    champion_error: float | None,
    min_improvement: float,
    max_pair_regression: float | None,
) -> None:
    """The decision's inputs and outcome on the pipeline run: both averages, `register/promoted`, and per
    blocking pair `register/pair_regression/<src>-<tgt>` (challenger minus champion error) as metrics; the
    rule's parameters and the blocking pairs with both errors as `register.*` tags."""
    metrics = {
        "register/challenger_error": challenger_error,
        "register/promoted": float(verdict.promoted),
        "register/blocking_pairs": float(len(verdict.blocking)),
    }
    if champion_error is not None:
        metrics["register/champion_error"] = champion_error
    metrics.update({f"register/pair_regression/{r.name}": r.delta for r in verdict.blocking})
    items = list(metrics.items())
    for start in range(0, len(items), 1000):  # MLflow takes at most 1,000 metrics per batch
        run.log_metrics(dict(items[start : start + 1000]), 0)
    blocking = "; ".join(str(r) for r in verdict.blocking) or "none"
    if len(blocking) > MAX_TAG_CHARS:
        blocking = blocking[: MAX_TAG_CHARS - 40].rsplit(";", 1)[0] + "; ... (all in register/pair_regression/*)"
    run.set_tags(
        {
            "register.min_improvement": str(min_improvement),
            "register.max_pair_regression": "none" if max_pair_regression is None else str(max_pair_regression),
            "register.blocking_pairs": blocking,
        }
    )
