"""Report module on hand-written run directories (format of docs/run-directory.md); fast."""
from __future__ import annotations

import base64
import re

import pytest

from tests.support.fake_run import write_fake_run
from wmrl.report import html as H
from wmrl.report.plots import ledger_breakdown
from wmrl.report.report import render_report, runs_table, write_report
from wmrl.report.runs import NotARunDir, load_run, method_label, read_jsonl
from wmrl.report.stats import intervals_overlap, mean_se, paired_difference


def test_method_label_reads_ablation_switches():
    assert method_label({"method": "grpo"}) == "grpo"
    assert method_label({"method": "wmrl", "wmrl": {"debias": True, "denoise": True, "fusion": "ivw"}}) == "wmrl"
    assert method_label({"method": "wmrl", "wmrl": {"debias": False}}) == "wmrl (no debias)"
    assert method_label({"method": "wmrl",
                         "wmrl": {"fusion": "ppi", "denoise": False}}) == "wmrl (no denoise, fusion=ppi)"
    assert method_label({}) == "?"
    # the recipe section's fusion sub-section (wmrl.fusion.min_pairs, ...) is not the removed fusion switch
    assert method_label({"method": "wmrl", "wmrl": {"fusion": {"min_pairs": 8, "alpha_floor": 0.05}}}) == "wmrl"


def test_the_run_line_reads_the_anchor_fraction_of_both_section_shapes():
    from wmrl.report.report import _config_highlights

    new = {"method": "wmrl", "wmrl": {"routing": {"anchor_fraction": 0.1}, "fusion": {"min_pairs": 8}}}
    assert _config_highlights(new) == "anchor fraction=0.1"
    assert _config_highlights({"method": "wmrl", "wmrl": {"anchor_fraction": 0.2, "fusion": "ppi"}}) == \
        "anchor fraction=0.2, fusion=ppi"


def test_read_jsonl_skips_truncated_last_line_only(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text('{"step": 1}\n{"step": 2}\n{"st')
    assert [r["step"] for r in read_jsonl(p)] == [1, 2]
    p.write_text('{"step": 1}\n{"st\n{"step": 3}\n')
    with pytest.raises(ValueError, match="m.jsonl:2"):
        read_jsonl(p)


def test_load_run_and_errors(tmp_path):
    with pytest.raises(NotARunDir, match="no such directory"):
        load_run(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotARunDir, match="not a wmrl run directory"):
        load_run(tmp_path / "empty")
    rd = write_fake_run(tmp_path / "r", "wmrl", steps=5, fusion="ppi")
    run = load_run(rd)
    assert run.method == "wmrl (fusion=ppi)" and run.finished
    assert list(run.metrics["step"]) == [1, 2, 3, 4, 5]
    assert run.final_eval("heldout")["step"] == 5
    assert len(run.calibration) == 5


def test_ledger_breakdown_adds_up_to_training_compute(tmp_path):
    run = load_run(write_fake_run(tmp_path / "g", "grpo", steps=4))
    parts = ledger_breakdown(run)
    assert "sandbox: anchors" in parts and "generate" in parts
    assert sum(parts.values()) == pytest.approx(run.totals()["train_compute_cpu_s"])


def test_stats():
    m = mean_se([0.2, 0.4, None, float("nan")])
    assert m.n == 2 and m.mean == pytest.approx(0.3) and m.se == pytest.approx(0.1)
    assert mean_se([0.5]).fmt() == "0.500"
    d = paired_difference({0: 0.5, 1: 0.7, 2: 0.9}, {0: 0.4, 1: 0.5})
    assert d.n == 2 and d.mean == pytest.approx(0.15)
    assert intervals_overlap(mean_se([0.1, 0.2]), mean_se([0.15, 0.25]))
    assert not intervals_overlap(mean_se([0.1, 0.11]), mean_se([0.9, 0.91]))


def test_report_compares_runs_and_embeds_pngs(tmp_path):
    dirs = [write_fake_run(tmp_path / "grpo", "grpo"), write_fake_run(tmp_path / "wmrl", "wmrl"),
            write_fake_run(tmp_path / "wm", "wm", finished=False)]
    out = write_report(dirs, tmp_path / "out" / "report.html", command="wmrl report ...")
    page = out.read_text()
    # Each run's name, method and config.
    for name in ("grpo", "wmrl", "wm"):
        assert f"<b>{name}</b>: method <b>{name}</b>" in page
    assert "full config" in page and "Not finished" in page
    for heading in ("Did the agent improve?", "Reward against steps", "Reward against compute",
                    "Evaluations: train and held-out leaderboard percentile",
                    "Calibration map before and after debiasing", "Ranking error and collapse",
                    "Alpha and noise variance over time",
                    "Compute ledger"):
        assert f"<h2>{heading}</h2>" in page
    imgs = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(imgs) >= 7
    ranking = page.split("<h2>Ranking error and collapse</h2>", 1)[1].split("<h2>", 1)[0]
    assert "data:image/png" in ranking
    assert all(base64.b64decode(b)[:8] == b"\x89PNG\r\n\x1a\n" for b in imgs)
    assert "http://" not in page and "https://" not in page  # self-contained


def test_improvement_rows_compare_step0_with_the_final_evaluation(tmp_path):
    from wmrl.report.runs import improvement_rows

    run = load_run(write_fake_run(tmp_path / "g", "grpo", steps=4))
    (row,) = improvement_rows(run)  # the fake run evaluates the held-out split at steps 0 and 4
    ev = run.evals
    p0 = float(ev[ev["step"] == 0]["mean_percentile"].iloc[0])
    p1 = float(ev[ev["step"] == 4]["mean_percentile"].iloc[0])
    assert row["split"] == "held-out tasks" and row["final step"] == 4 and row["samples"] == 8
    assert row["step 0"] == pytest.approx(p0) and row["final"] == pytest.approx(p1)
    assert row["change"] == pytest.approx(p1 - p0)


def test_runs_table_and_markdown(tmp_path):
    run = load_run(write_fake_run(tmp_path / "g", "grpo", steps=3))
    df = runs_table([run])
    assert df.loc[0, "method"] == "grpo" and df.loc[0, "steps"] == 3
    md = H.table_markdown(df)
    assert md.splitlines()[0].startswith("| run | method |")
    with pytest.raises(ValueError, match="at least one run"):
        render_report([])


def test_report_shows_each_runs_fidelity_card(tmp_path):
    import json

    import numpy as np

    from wmrl.report.report import fidelity_table
    from wmrl.report.runs import load_runs
    from wmrl.world_model.fidelity import fidelity_card, format_figure
    from wmrl.world_model.outcome import OutcomePrediction

    w, g = write_fake_run(tmp_path / "wmrl", "wmrl"), write_fake_run(tmp_path / "grpo", "grpo")
    probs = np.array([[0.1, 0.1, 0.1, 0.7], [0.1, 0.6, 0.1, 0.2], [0.2, 0.2, 0.2, 0.4], [0.1, 0.1, 0.1, 0.7]])
    card = fidelity_card(OutcomePrediction(np.array([0.6, 0.1, 0.3, 0.5]), probs, np.zeros(4)), [0.7, 0.0, 0.0, 0.4],
                         ["valid", "runtime_error", "runtime_error", "valid"], [(1, 0), (1, 0), (2, 0), (2, 0)],
                         n_boot=50)
    (w / "fidelity.json").write_text(json.dumps(card.to_dict()))
    table = fidelity_table(load_runs([w, g]))
    assert list(table["run"]) == ["wmrl"]  # grpo has no world model, so no card
    row = table.iloc[0]
    assert row["programs"] == 4
    assert row["status accuracy @1"] == format_figure(card.status_acc1) == "0.750 [0.500, 1.000]"
    assert row["failure AUC"] == format_figure(card.failure_auc)
    assert row["true / predicted valid share"] == "0.50 / 0.50"
    page = write_report([w, g], tmp_path / "r.html").read_text()
    assert "<h2>World-model fidelity on the anchors</h2>" in page and format_figure(card.ece) in page
    assert "World-model fidelity" not in write_report([g], tmp_path / "g.html").read_text()
