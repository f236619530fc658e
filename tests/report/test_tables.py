"""The one table model: a cell reads the same in Markdown, HTML and CSV."""
from __future__ import annotations

import csv
import io
import math

import pandas as pd

from wmrl.report.stats import mean_se
from wmrl.report.tables import Cell, Table


def test_cell_text_rules():
    assert Cell(0.5123, 0.0311, ".3f").text() == "0.512 ± 0.031"
    assert Cell.mean_se(mean_se([0.5]), 3).text() == "0.500"          # one seed: SE undefined
    assert Cell.mean_se(mean_se([]), 2).text() == "n/a"
    assert Cell(math.inf, fmt=".0f").text() == "n/a" and Cell(12.4, fmt=".0f").text() == "12"
    assert Cell(None).text() == "" and Cell(math.nan).text() == "n/a" and Cell(1 / 3).text() == "0.3333"
    assert Cell(3).text() == "3" and Cell("—").text() == "—"


def test_one_table_three_renderings():
    t = Table.from_records([{"method": "a|b", "x": Cell(0.25, 0.01, ".2f")}, {"method": "<c>, d", "x": Cell(None)}])
    assert t.to_markdown().splitlines() == ["| method | x |", "|---|---|", "| a\\|b | 0.25 ± 0.01 |", "| <c>, d |  |"]
    assert "<td>&lt;c&gt;, d</td><td></td>" in t.to_html()
    assert list(csv.reader(io.StringIO(t.to_csv()))) == [["method", "x"], ["a|b", "0.25 ± 0.01"], ["<c>, d", ""]]
    assert t.drop(["x"]).columns == ["method"] and t.to_frame().loc[0, "x"] == "0.25 ± 0.01"
    assert Table([]).empty


def test_from_frame_matches_pandas_csv():
    df = pd.DataFrame({"method": ["grpo", "wm"], "seeds": [2, 2], "v": ["0.1 ± 0.0", "a, b"]})
    assert Table.from_frame(df).to_csv() == df.to_csv(index=False)


def test_the_world_model_table_counts_exploitation_alarms():
    import pandas as pd

    from wmrl.report.bench_page import world_model_table

    res = pd.DataFrame({"method": ["wmrl"] * 3 + ["wm"], "wm_anchor_pairs": [10, 12, 8, 0],
                        "wm_spearman": [0.5] * 4, "wm_pairwise_accuracy": [0.7] * 4, "debias_sq_err_ratio": [1.0] * 4,
                        "alpha_mean": [0.3] * 4, "exploit_alarms": [2, 0, 1, float("nan")],
                        "exploit_first_alarm": [12, float("nan"), 30, float("nan")],
                        **{c: [float("nan")] * 4 for c in ("wm_status_acc1", "wm_failure_auc", "wm_ece", "wm_mae")}})
    md = world_model_table(res).to_markdown()
    assert "3 (2 of 3 runs, first at steps 12, 30)" in md and "| wm |" not in md
    assert "| - |" in world_model_table(res.assign(exploit_alarms=float("nan"))).to_markdown()


def test_train_task_paired_notes_resolve_a_clear_difference():
    import pandas as pd

    from wmrl.report.bench_stats import train_paired_notes

    res = pd.DataFrame({"method": ["wmrl"] * 3 + ["wm"] * 3 + ["wmrl-raw"],
                        "seed": [0, 1, 2] * 2 + [0],
                        "train_percentile": [0.8, 0.7, 0.75, 0.3, 0.4, 0.35, 0.8]})
    notes = train_paired_notes(res, "wmrl", ["wm", "wmrl-raw", "wmrl-ppi"])
    assert notes[0].startswith("wm vs wmrl: train-task percentile, paired difference -0.400 ± 0.058 over 3 seed(s)")
    assert "more than 2 SE below wmrl" in notes[0]
    assert notes[1].endswith("one seed, SE undefined.") and len(notes) == 2
    assert train_paired_notes(res.assign(train_percentile=float("nan")), "wmrl", ["wm"]) == []
