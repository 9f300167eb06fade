"""`interlingua compare` on its own, over MLflow records written here (mechanics, not quality)."""

from __future__ import annotations

import pytest

from orchestration.adapters import tracking
from orchestration.cli import main
from orchestration.config import ConfigError, load_config
from orchestration.lifecycle.compare import compare_runs
from tests.support.runs import store_uri


def log_eval(uri: str, name: str, lr: float, errors: dict[str, float], train_run: str) -> str:
    run = tracking.start_run(
        uri,
        "interlingua",
        name,
        {"name": name, "train": {"lr": lr, "seed": 0}},
        tags={"interlingua.stage": "evaluate", "interlingua.train_run_id": train_run},
    )
    metrics = {f"eval/xsim_error/{pair}": e for pair, e in errors.items()}
    metrics["eval/xsim_error"] = sum(errors.values()) / len(errors)
    metrics["eval/xsim_error/avg_ef"] = metrics["eval/xsim_error"]
    tracking.log_metrics(uri, run, metrics, 0)
    tracking.end_run(uri, run, "FINISHED")
    return run


def log_train(uri: str, name: str, curve: list[float]) -> str:
    run = tracking.start_run(uri, "interlingua", name, {"name": name}, tags={"interlingua.stage": "train"})
    for step, error in enumerate(curve, start=1):
        tracking.log_metrics(uri, run, {"dev/xsim_error": error}, step * 10)
    tracking.log_metrics(uri, run, {"dev/best_xsim_error": min(curve)}, 10 * len(curve))
    tracking.end_run(uri, run, "FINISHED")
    return run


def test_runs_best_first_with_the_differing_parameters_pairs_and_a_figure(tmp_path):
    uri = store_uri(tmp_path)
    config = load_config(None, [f"tracking.uri={uri}"])
    slow = log_train(uri, "slow", [0.9, 0.8])
    fast = log_train(uri, "fast", [0.7, 0.3])
    log_eval(uri, "a-eval", 0.001, {"en-fr": 0.50, "fr-en": 0.40}, slow)
    log_eval(uri, "b-eval", 0.01, {"en-fr": 0.20, "fr-en": 0.10}, fast)
    lines = compare_runs(config, pairs=True, plot=str(tmp_path / "cmp.png")).splitlines()
    assert lines[0] == "experiment 'interlingua': 2 evaluation runs, best first"
    header = lines[1].split()
    assert header[:3] == ["run", "train.lr", "error"] and "train.seed" not in header  # only what differs
    assert lines[3].split()[:3] == ["b-eval", "0.01", "15.00"] and lines[4].split()[:3] == ["a-eval", "0.001", "45.00"]
    pair_rows = {line.split()[0]: line.split()[1:] for line in lines if line.startswith(("en-fr", "fr-en"))}
    assert pair_rows == {"en-fr": ["20.00", "50.00"], "fr-en": ["10.00", "40.00"]}
    assert (tmp_path / "cmp.png").stat().st_size > 10_000
    assert "figure:" in compare_runs(config, plot=str(tmp_path / "cmp.png"))  # its own figure: replaced

    from PIL import Image

    from core.ownership import ForeignDataError

    Image.new("RGB", (4, 4)).save(tmp_path / "holiday.png")  # a user's picture of the same kind
    user = (tmp_path / "holiday.png").read_bytes()
    with pytest.raises(ForeignDataError, match="holiday.png"):
        compare_runs(config, plot=str(tmp_path / "holiday.png"))
    assert (tmp_path / "holiday.png").read_bytes() == user
    # without a suffix the figure's name is checked as it will be written (matplotlib would add .png after)
    with pytest.raises(ForeignDataError, match="holiday.png"):
        compare_runs(config, plot=str(tmp_path / "holiday"))
    assert (tmp_path / "holiday.png").read_bytes() == user and not (tmp_path / "holiday").exists()
    with pytest.raises(ConfigError, match=r"\.png"):
        compare_runs(config, plot=str(tmp_path / "report.pdf"))

    trains = compare_runs(config, stage="train").splitlines()
    assert trains[0] == "experiment 'interlingua': 2 training runs, best first"
    assert trains[3].split()[0] == "fast" and trains[3].split()[-1] == "FINISHED"


def compare_error(capsys, *args: str) -> str:
    """The one line `interlingua compare` writes when it exits 2."""
    assert main(["compare", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.splitlines()) == 1, captured.err
    assert captured.err.startswith("interlingua compare: error: ")
    return captured.err.strip()


def test_an_unknown_or_empty_experiment_or_test_set_is_an_error_naming_what_exists(tmp_path, capsys):
    uri = store_uri(tmp_path)
    store = f"tracking.uri={uri}"
    assert compare_error(capsys, store) == (  # a store never written to
        f"interlingua compare: error: tracking.experiment 'interlingua': no such experiment in {uri} "
        "(it has: 'Default'); a stage's first run creates it"
    )
    tracking.experiment_id(uri, "empty")
    train_run = log_train(uri, "slow", [0.9, 0.8])
    assert compare_error(capsys, store, "--experiment", "nothing") == (
        f"interlingua compare: error: --experiment 'nothing': no such experiment in {uri} (it has: "
        "'Default', 'empty', 'interlingua'); a stage's first run creates it"
    )
    assert compare_error(capsys, store, "--experiment", "empty") == (
        f"interlingua compare: error: experiment 'empty' of {uri} has no evaluation runs (its runs: none)"
    )
    assert (
        "has no evaluation runs (its runs: 1 training); `interlingua evaluate` makes evaluation runs"
        in compare_error(capsys, store)
    )

    log_eval(uri, "a-eval", 0.001, {"en-fr": 0.50, "fr-en": 0.40}, train_run)
    assert compare_error(capsys, store, "--testset", "gospels") == (
        f"interlingua compare: error: experiment 'interlingua' of {uri} has no evaluation runs on test set "
        "'gospels' (its runs: 1 evaluation, 1 training); evaluated: the split"
    )
    assert main(["compare", store]) == 0 and "a-eval" in capsys.readouterr().out


def test_a_test_set_name_holding_a_quote_is_found(tmp_path, capsys):
    from orchestration.cli import main

    uri = store_uri(tmp_path)
    for name, testset in (("quoted-eval", "it's"), ("plain-eval", "its"), ("split-eval", None)):
        run = tracking.start_run(
            uri,
            "interlingua",
            name,
            {"name": name},
            tags={"interlingua.stage": "evaluate", **({"interlingua.testset": testset} if testset else {})},
        )
        tracking.log_metrics(uri, run, {"eval/xsim_error": 0.25}, 0)
        tracking.end_run(uri, run, "FINISHED")
    assert main(["compare", "--testset", "it's", f"tracking.uri={uri}"]) == 0
    out = capsys.readouterr().out
    assert "1 evaluation runs" in out and "quoted-eval" in out and "plain-eval" not in out
    assert main(["compare", "--testset", 'say "it\'s"', f"tracking.uri={uri}"]) == 2  # MLflow cannot match it
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--testset 'say \"it\\'s\"': MLflow's search filter cannot match" in err, err
