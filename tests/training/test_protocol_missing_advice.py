"""`wmrl eval --protocol` over a split where one competition is prepared but refused at load and one is not
prepared: the error says which is which, the refused one with its cause, and does not advise preparing a
competition that is prepared."""
from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from wmrl.cli import app
from wmrl.runs.rundir import RunDir
from wmrl.tasks.fixtures import build_benchmark_fixtures
from wmrl.training.config import load_config, save_config

ROOT = Path(__file__).resolve().parents[2]

PROTOCOL = """\
split: [dojo-titanicp, dojo-houseprices, dojo-absent]
categories: {dojo-titanicp: classification, dojo-houseprices: regression, dojo-absent: regression}
samples_per_task: 2
overall: category_mean
"""


def test_missing_competitions_are_told_apart_by_why(tmp_path):
    bench = tmp_path / "bench"
    build_benchmark_fixtures(bench, ("mledojo",))
    (bench / "mle-dojo" / "mledojo" / "competitions" / "dojo-houseprices" / "utils" / "metric.py").unlink()
    run = tmp_path / "run"
    run.mkdir()
    cfg = load_config(ROOT / "configs" / "tiny.yaml", [f"tasks.root={bench}", f"run_dir={run}",
                                                       "tasks.train=[dojo-titanicp]"])
    save_config(cfg, RunDir(run).config)
    proto = tmp_path / "small.yaml"
    proto.write_text(PROTOCOL)
    r = CliRunner().invoke(app, ["eval", str(run), "--checkpoint", "initial", "--protocol", str(proto),
                                 "--root", str(bench)])
    out = " ".join(r.output.split())
    assert r.exit_code == 2, r.output
    assert "dojo-houseprices: refused: task 'dojo-houseprices': no metric found" in out
    assert "1 (dojo-houseprices) is prepared but refused at load: fix the cause named on its line" in out
    assert "1 (dojo-absent) is not prepared under the roots: prepare them" in out
    assert "--allow-missing" in out


def test_a_competition_without_a_validation_view_under_several_turns_is_advised_one_turn():
    from wmrl.training.evaluate_cli import missing_advice

    why = ("no validation view for 4-turn episodes: task 'afsis-soil-properties' has no validation view: its "
           "submission is the sample submission's table (Ca, P, pH, SOC, Sand)")
    msg = missing_advice("paper", 14, [("afsis-soil-properties", why)], any_found=True)
    assert "1 (afsis-soil-properties) has no validation view" in msg and "--override max_turns=1" in msg
    assert "prepare" not in msg and "--allow-missing" in msg
