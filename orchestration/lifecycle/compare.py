"""`interlingua compare`: the evaluation runs of an MLflow experiment side by side.

A terminal table of the parameters that differ between the runs, their
average errors (all pairs and the Table 1 subsets) and, with --pairs, every
pair's error; and a figure with the learning curves (dev similarity error of
each run's training) and each run's error matrix minus the best run's.
Works against any tracking URI, the embedded sqlite store or a server.
"""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from core.location import Location
from core.ownership import ForeignDataError
from evaluation.report import grid
from orchestration.adapters import tracking
from orchestration.adapters.tracker import Tracker
from orchestration.config import Config, ConfigError

IGNORED = {"run_dir", "dataset_dir", "name"}  # differ by construction
PLOT_SOFTWARE = "interlingua compare"  # in the PNG it writes: the one kind of file --plot may replace


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
    return "\n".join([fmt.format(*header), fmt.format(*["-" * w for w in widths])] + [fmt.format(*r) for r in rows])


def _differing(params: list[dict[str, str]]) -> list[str]:
    keys = sorted(set().union(*params))
    return [k for k in keys if k not in IGNORED and len({p.get(k) for p in params}) > 1]


# per stage: the runs' error metric and the prefix of their per-pair errors
LABELS = {"evaluate": "evaluation", "train": "training"}
METRICS = {"evaluate": ("eval/xsim_error", "eval/xsim_error/"), "train": ("dev/best_xsim_error", "dev/xsim_error/")}


def compare_runs(
    config: Config,
    *,
    experiment: str | None = None,
    max_runs: int = 20,
    pairs: bool = False,
    plot: str | None = None,
    stage: str = "evaluate",
    testset: str | None = None,
) -> str:
    """The runs of `stage` (evaluation runs by test error, on the split or on the test set `testset`;
    training runs and tune trials by best dev error). ConfigError for an experiment that does not exist or
    holds no such run (naming what exists): an empty table answers nothing."""
    uri = Tracker.of(config).uri
    flag = "--experiment" if experiment else "tracking.experiment"
    experiment = experiment or config.tracking.experiment
    if max_runs < 1:
        raise ConfigError(f"--max-runs {max_runs}: show at least one run")
    if plot and not Path(plot).suffix:
        plot += ".png"  # the name the figure gets: checked below, not added after the check
    if plot and Path(plot).suffix.lower() != ".png":
        raise ConfigError(f"--plot {plot}: the figure is a PNG; give a path ending in .png")
    if plot and not Path(plot).resolve().parent.is_dir():
        raise ConfigError(f"--plot {plot}: the folder {Path(plot).resolve().parent} does not exist")
    if plot and Path(plot).exists() and _written_by(Path(plot)) != PLOT_SOFTWARE:
        raise ForeignDataError(
            f"--plot {plot}: the file exists and is not a figure interlingua compare wrote; "
            "it is never overwritten: give another path"
        )
    tracking.check_reachable(uri)
    if experiment not in (names := tracking.experiment_names(uri)):
        raise ConfigError(
            f"{flag} {experiment!r}: no such experiment in {uri} (it has: "
            f"{', '.join(map(repr, names)) or 'none'}); a stage's first run creates it"
        )
    metric, pair_prefix = METRICS[stage]
    where = f"tags.`{tracking.STAGE_TAG}` = '{stage}'"
    if stage == "evaluate":
        on = f"= {_literal(testset)}" if testset else "IS NULL"  # a test set's runs, or the split's
        where += f" and tags.`{tracking.TESTSET_TAG}` {on}"
    runs = tracking.search_runs(uri, experiment, where, max_runs)
    if not runs:
        raise ConfigError(_no_runs(uri, experiment, stage, testset))
    runs = sorted(runs, key=lambda r: r.data.metrics.get(metric, np.inf))
    differing = _differing([r.data.params for r in runs])
    averages = sorted({k.rsplit("avg_", 1)[1] for r in runs for k in r.data.metrics if "/avg_" in k}, key=len)
    header = ["run", *differing, "error %", *averages] + (["status"] if stage == "train" else [])
    rows = []
    for r in runs:
        m = r.data.metrics
        rows.append(
            [
                r.info.run_name or r.info.run_id[:8],
                *[r.data.params.get(k, "") for k in differing],
                _pct(m.get(metric)),
                *[_pct(m.get(f"{pair_prefix}avg_{a}")) for a in averages],
            ]
            + ([r.info.status] if stage == "train" else [])
        )
    out = [f"experiment {experiment!r}: {len(runs)} {LABELS[stage]} runs, best first", _table(header, rows)]
    if pairs:
        names = sorted(
            {k.rsplit("/", 1)[1] for r in runs for k in r.data.metrics if k.startswith(pair_prefix) and "avg_" not in k}
        )
        pair_rows = [[n, *[_pct(r.data.metrics.get(f"{pair_prefix}{n}")) for r in runs]] for n in names]
        out += [
            "",
            "error % per pair",
            _table(["pair", *[r.info.run_name or r.info.run_id[:8] for r in runs]], pair_rows),
        ]
    if plot:
        _plot(uri, runs, plot)
        out.append(f"\nfigure: {plot}")
    return "\n".join(out)


def _no_runs(uri: str, experiment: str, stage: str, testset: str | None) -> str:
    """What the experiment holds instead of the runs asked for: its runs of each stage, the test sets evaluated."""
    runs = tracking.search_runs(uri, experiment, "", max_results=10_000)
    stages = [r.data.tags.get(tracking.STAGE_TAG) for r in runs]
    counts = sorted(Counter(stages).items(), key=str)
    held = ", ".join(f"{n} {LABELS.get(s, s or 'untagged')}" for s, n in counts) or "none"
    what = f"{LABELS[stage]} runs" + (f" on test set {testset!r}" if testset else "")
    message = f"experiment {experiment!r} of {uri} has no {what} (its runs: {held})"
    if stage == "evaluate" and "evaluate" in stages:
        sets = {r.data.tags.get(tracking.TESTSET_TAG) for r in runs if r.data.tags.get(tracking.STAGE_TAG) == stage}
        evaluated = sorted(f"--testset {name}" for name in sets if name) + (["the split"] if None in sets else [])
        message += f"; evaluated: {', '.join(evaluated)}"
    elif stage == "evaluate" and "train" in stages:
        message += "; `interlingua evaluate` makes evaluation runs, `--stage train` compares the training runs"
    return message


def _pct(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.2f}"


def _matrix(run: Any) -> tuple[list[str], np.ndarray]:
    pairs = {
        k.rsplit("/", 1)[1]: v
        for k, v in run.data.metrics.items()
        if k.startswith("eval/xsim_error/") and "avg_" not in k
    }
    langs = sorted({lang for pair in pairs for lang in pair.split("-")})
    return langs, grid({tuple(pair.split("-")): value for pair, value in pairs.items()}, langs)


def _written_by(path: Path) -> str | None:
    """The PNG's Software text field ('' for another file)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            return str(image.info.get("Software", ""))
    except (OSError, UnidentifiedImageError):
        return ""


def _plot(uri: str, runs: list, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    others = runs[1:4]
    fig, axes = plt.subplots(1, 1 + len(others), figsize=(5 + 4 * len(others), 4), squeeze=False)
    curves = axes[0][0]
    for run in runs:
        trained = run.data.tags.get(tracking.TRAIN_RUN_TAG) or run.data.tags.get("mlflow.parentRunId")
        history = tracking.metric_history(uri, trained, "dev/xsim_error") if trained else []
        if history:
            steps, errors = zip(*sorted(history))
            curves.plot(steps, [100 * v for v in errors], label=run.info.run_name)
    curves.set_xlabel("step")
    curves.set_ylabel("dev similarity error %")
    curves.set_title("learning curves")
    if curves.lines:
        curves.legend(fontsize=7)
    best_langs, best = _matrix(runs[0])
    for ax, run in zip(axes[0][1:], others):
        langs, values = _matrix(run)
        if langs != best_langs:
            ax.set_title(f"{run.info.run_name}: other languages")
            continue
        diff = 100 * (values - best)
        image = ax.imshow(diff, cmap="RdBu_r", vmin=-np.nanmax(np.abs(diff)), vmax=np.nanmax(np.abs(diff)))
        ax.set_xticks(range(len(langs)), langs)
        ax.set_yticks(range(len(langs)), langs)
        ax.set_title(f"{run.info.run_name} - best (points)", fontsize=9)
        fig.colorbar(image, ax=ax)
    fig.tight_layout()
    figure = io.BytesIO()
    fig.savefig(
        figure, format="png", dpi=110, metadata={"Software": PLOT_SOFTWARE}
    )  # how a rerun knows it may replace it
    plt.close(fig)
    Location.of(path, "--plot").replace_bytes(figure.getvalue())  # whole, under exactly this name, never through a link


def _literal(testset: str) -> str:
    try:
        return tracking.literal(testset)
    except ValueError as exc:
        raise ConfigError(f"--testset {exc}") from None
