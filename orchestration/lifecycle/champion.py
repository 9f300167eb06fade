"""The champion decision: register the challenger, measure the champion on the same data, promote or not.

The trained model is logged as an MLflow pyfunc model and registered under
`registry.model_name`. The version holding the alias `champion` is evaluated
again on the same, current evaluation set, and the challenger takes the alias
only when its average error is lower by `registry.min_improvement`; both
numbers and the decision are logged to the pipeline run.
"""
from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass

from orchestration import tracking
from orchestration.config import Config

log = logging.getLogger(__name__)

MODEL_TAG = "interlingua.model_sha256"  # a registered version's model file, to find it again


@dataclass
class Decision:
    promoted: bool
    message: str
    version: str
    challenger_error: float
    champion_error: float | None  # None when there was no champion


def beats(challenger_error: float, champion_error: float, min_improvement: float) -> bool:
    """The rule: the challenger's average error is lower than the champion's by more than `min_improvement`
    (errors as fractions; a tie keeps the champion)."""
    return challenger_error < champion_error - min_improvement


def register_and_decide(config: Config, uri: str, name: str, sha: str, trained, challenger,
                        parent_run_id: str) -> Decision:
    """Register `trained` (a TrainResult) evaluated as `challenger` (an EvalResult); promote it when it
    beats the champion re-evaluated on the same split by `registry.min_improvement`."""
    from model.nmt import load_model
    from orchestration.evaluate.job import evaluate
    from orchestration.model_dir import MODEL_FILE

    dim = load_model(str(trained.model_dir / MODEL_FILE))[0].embedding_dim
    info = tracking.log_pyfunc_model(uri, trained.run_id, trained.model_dir, dim)
    version = tracking.register_model(uri, info.model_uri, name, {
        MODEL_TAG: sha, "eval.xsim_error": f"{challenger.averages['all']:.6f}", "train_run_id": trained.run_id,
    })
    challenger_error, champion_error = challenger.averages["all"], None
    current = tracking.champion(uri, name)
    margin = config.registry.min_improvement
    if current is None:
        promoted, reason = True, "no champion yet"
    else:
        with tempfile.TemporaryDirectory(prefix="champion-") as tmp:
            champion_dir = tracking.download_model_dir(uri, name, current.version, tmp)
            champion = evaluate(config, model_dir=champion_dir, label=f"champion-v{current.version}",
                                parent_run_id=parent_run_id)
        champion_error = champion.averages["all"]
        promoted = beats(challenger_error, champion_error, margin)
        reason = (f"challenger v{version} {100 * challenger_error:.2f}% vs champion v{current.version} "
                  f"{100 * champion_error:.2f}% (needs {100 * margin:.2f} points better)")
    if promoted:
        tracking.promote(uri, name, version)
    metrics = {"register/challenger_error": challenger_error, "register/promoted": float(promoted)}
    if champion_error is not None:
        metrics["register/champion_error"] = champion_error
    tracking.log_metrics(uri, parent_run_id, metrics, 0)
    message = f"{'promoted' if promoted else 'not promoted'} {name} v{version}: {reason}"
    log.info(message)
    return Decision(promoted, message, version, challenger_error, champion_error)
