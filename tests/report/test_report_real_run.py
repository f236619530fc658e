"""`wmrl report` on run directories written by the real trainer (the CI miniature bench: tiny model,
two steps, grpo and wmrl)."""
from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from wmrl.cli import app
from wmrl.report.plots import ledger_breakdown
from wmrl.report.runs import load_run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real_runs():
    from tests.support.real_runs import mini_bench

    out, _ = mini_bench()
    return [out / "grpo" / "seed0", out / "wmrl" / "seed0"]


def test_report_from_real_runs(real_runs, tmp_path):
    runs = [load_run(d) for d in real_runs]
    assert [r.method for r in runs] == ["grpo", "wmrl"]
    assert all(r.finished and list(r.metrics["step"]) == [1, 2] for r in runs)
    assert runs[1].calibration, "wmrl writes calibration records"
    for r in runs:  # the ledger parts add up to the training compute (nested phases counted once)
        assert sum(ledger_breakdown(r).values()) == pytest.approx(r.totals()["train_compute_cpu_s"], rel=1e-6)
    out = tmp_path / "r.html"
    res = CliRunner().invoke(app, ["report", *map(str, real_runs), "--out", str(out)])
    assert res.exit_code == 0, res.output
    page = out.read_text()
    assert "method <b>grpo</b>" in page and "method <b>wmrl</b>" in page and "full config" in page
    assert len(re.findall(r"data:image/png;base64,", page)) >= 4
    assert "<h2>Compute ledger</h2>" in page and "sandbox: anchors" in page
    # the world model's fidelity card on the wmrl run's anchors (grpo has no world model, so no card)
    assert runs[0].fidelity is None and runs[1].fidelity["n"] == int(runs[1].metrics["n_anchor_samples"].sum()) > 0
    assert runs[1].fidelity["n_boot"] == 1000 and "<h2>World-model fidelity on the anchors</h2>" in page


def test_report_cli_rejects_non_run_dir(tmp_path):
    res = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert res.exit_code == 2
    assert "not a wmrl run directory" in res.output
