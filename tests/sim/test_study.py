"""The study driver: run bookkeeping, summary, Markdown and plots on a tiny custom preset."""
import json

import numpy as np
import pandas as pd
import pytest

from wmrl.sim.bandit import WorldModelSpec
from wmrl.sim.engine import SimConfig
from wmrl.sim.study import PRESETS, THIRD, Preset, build_runs, run_study

TINY = Preset(
    cfg=SimConfig(n_tasks=4, n_arms=12, group_size=4, steps=10, log_every=5),
    seeds=(0,),
    biases={"exploit": (0.5,)},
    sigmas=(0.0,),
    rho_sweep=(0.25,),
    rho_sweep_errors=(WorldModelSpec("exploit", 0.5, 0.0),),
    flat_shapes=("exploit",),
    dr_errors=(WorldModelSpec("exploit", 0.5, 0.0),),
)


def test_build_runs_has_no_duplicates_and_references():
    runs = build_runs(PRESETS["default"])
    for rs in runs.values():
        keys = [(r.method, r.wm, round(r.rho, 6), r.seed) for r in rs]
        assert len(keys) == len(set(keys))
        assert sum(r.method == "grpo" for r in rs) == 3
    assert any(np.isclose(r.rho, THIRD) for r in runs[True])


def test_run_study_writes_tables_and_plots(tmp_path):
    res = run_study(TINY, out=tmp_path, margin=0.01)
    for name in ("curves.csv.gz", "finals.csv", "summary.csv", "summary.md", "meta.json",
                 "curves_vs_steps.png", "curves_vs_executions.png", "heatmaps_vs_grpo.png", "rho_sweep.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    s = pd.read_csv(tmp_path / "summary.csv")
    g = s[s.method == "grpo"]
    assert set(g.std_norm) == {True, False}
    assert np.allclose(g.vs_grpo_steps, 0.0) and np.allclose(g.exec_ratio, 1.0)
    ao = s[(s.method == "anchor-only") & s.std_norm]
    assert set(np.round(ao.rho, 2)) == {0.1, 0.25, 0.33}  # main, sweep, the third
    md = (tmp_path / "summary.md").read_text()
    assert "### Anchor fraction rho = 0.10" in md and "Dr. GRPO" in md and "wmrl-flat" in md
    assert json.loads((tmp_path / "meta.json").read_text())["preset"] == "custom"
    assert res["runs"] == len(pd.read_csv(tmp_path / "finals.csv"))


def test_unknown_preset():
    with pytest.raises(ValueError, match="unknown preset"):
        run_study("huge")


def test_simulate_bad_flags_are_clear_errors_before_any_run(tmp_path):
    """QA: `--out FILE` / an uncreatable `--out` were tracebacks; `--margin nan` was accepted."""
    import typer
    from typer.testing import CliRunner

    from wmrl.sim import cli as sim_cli

    app = typer.Typer()
    sim_cli.register(app)
    app.command(name="noop")(lambda: None)  # two commands, so `simulate` is a subcommand
    afile = tmp_path / "afile"
    afile.write_text("keep")
    for args, hint in ([["--out", str(afile)], "not a folder"],
                       [["--out", "/proc/wmrl-nope/x"], "cannot create"],
                       [["--margin", "nan"], "--margin"],
                       [["--margin", "-0.5"], "--margin"]):
        r = CliRunner().invoke(app, ["simulate", "--preset", "small", "--seeds", "1", *args])
        assert r.exit_code == 2 and hint in r.output, (args, r.output)
        assert not isinstance(r.exception, (OSError, ValueError)), r.exception
    assert afile.read_text() == "keep"
    with pytest.raises(ValueError, match="margin"):
        run_study("small", out=tmp_path / "o", margin=float("inf"))


def test_simulate_async_bad_flags_are_clear_errors_before_any_run(tmp_path):
    """Review: `--shape nope`, `--method grpo` and `--mean-latency-steps inf` named no option (grpo's said
    "staleness 36"), and made the --out folder first; a method or shape named twice was a pandas traceback."""
    import typer
    from typer.testing import CliRunner

    from wmrl.sim import cli as sim_cli
    from wmrl.sim.staleness import run_regime_study

    app = typer.Typer()
    sim_cli.register(app)
    afile = tmp_path / "afile"
    afile.write_text("keep")
    out = tmp_path / "o"
    for args, hint in ([["--shape", "nope"], "--shape"], [["--method", "grpo"], "both streams"],
                       [["--method", "nope"], "--method"], [["--method", "anchor-only"], "--method"],
                       [["--horizon", "0"], "--horizon"], [["--seeds", "0"], "--seeds"],
                       [["--mean-latency-steps", "inf"], "--mean-latency-steps"],
                       [["--mean-latency-steps", "0"], "--mean-latency-steps"]):
        r = CliRunner().invoke(app, ["simulate-async", "--out", str(out), "--seeds", "1", "--horizon", "2", *args])
        assert r.exit_code == 2 and hint in r.output, (args, r.output)
        assert not out.exists(), args
    r = CliRunner().invoke(app, ["simulate-async", "--out", str(afile), "--seeds", "1", "--horizon", "2"])
    assert r.exit_code == 2 and "--out" in r.output and afile.read_text() == "keep"
    res = run_regime_study(out, seeds=1, methods=("wmrl", "wmrl"), shapes=("exploit", "exploit"), horizons=(2, 2),
                           mean_steps=2.0)
    assert len(res["summary"]) == 3 and (res["summary"]["seeds"] == 1).all()  # sync, skip, update: once each
    with pytest.raises(ValueError, match="horizon"):
        run_regime_study(out, seeds=1, horizons=(2, 0))
