"""Evaluation protocols: the aggregation (avg@k, failures as the failure score, category means) on small fixed
inputs; the registry and YAML loading, bad input refused with a message naming what is wrong; the paper's split."""
from __future__ import annotations

import math

import pytest

from wmrl.training.config import ConfigError
from wmrl.training.evaluation import sample_outcomes
from wmrl.training.protocol import (ALL, PAPER, EvalProtocol, aggregate, get_protocol, load_protocol,
                                    protocol_from_dict, protocol_names, register_protocol, sample_score)


def _proto(**kw) -> EvalProtocol:
    base = dict(name="t", split=["a", "b", "c"], categories={"a": "tab", "b": "tab", "c": "img"})
    return EvalProtocol(**{**base, **kw})


def _o(statuses, rewards, best=None):
    return {"status": list(statuses), "reward": list(rewards),
            "best_valid_reward": list(best) if best is not None else [r if s == "ok" else None
                                                                       for s, r in zip(statuses, rewards)]}


# ------------------------------------------------------------------------------------------------ aggregation

def test_avg_at_k_counts_failures_as_the_failure_score_and_averages_categories():
    outcomes = {
        "a": _o(["ok", "ok", "runtime_error", "ok"], [0.8, 0.4, 0.05, 0.6]),       # the failure's 0.05 is not used
        "b": _o(["ok", "invalid_submission", "timeout", "ok"], [1.0, 0.0, 0.0, 0.2]),
        "c": _o(["ok", "ok", "ok", "ok"], [0.1, 0.1, 0.3, 0.3]),
    }
    res = aggregate(_proto(overall="category_mean"), outcomes, 4)
    assert res["per_task"]["a"]["avg_at_k"] == pytest.approx((0.8 + 0.4 + 0 + 0.6) / 4)
    assert res["per_task"]["a"]["scores"] == [0.8, 0.4, 0.0, 0.6]
    assert res["per_task"]["b"]["avg_at_k"] == pytest.approx(0.3)
    assert res["per_task"]["c"]["avg_at_k"] == pytest.approx(0.2)
    assert (res["per_task"]["a"]["n_failed"], res["per_task"]["b"]["n_failed"], res["n_failed"]) == (1, 2, 3)
    assert res["categories"]["tab"] == {"mean": pytest.approx((0.45 + 0.3) / 2), "n_tasks": 2, "tasks": ["a", "b"]}
    assert res["categories"]["img"]["mean"] == pytest.approx(0.2)
    assert list(res["categories"]) == ["tab", "img"]  # table order: as the split lists them
    assert res["category_mean"] == pytest.approx((0.375 + 0.2) / 2)
    assert res["task_mean"] == pytest.approx((0.45 + 0.3 + 0.2) / 3)
    assert res["overall"] == res["category_mean"] and res["overall_kind"] == "category_mean"
    assert res["comparable"] and res["not_comparable"] == [] and res["n_samples"] == 12
    assert aggregate(_proto(), outcomes, 4)["overall"] == pytest.approx(res["task_mean"])


def test_a_nonzero_failure_score_and_best_turn_scoring():
    outcomes = {"a": _o(["ok", "runtime_error"], [0.2, 0.0], best=[0.7, 0.5]),
                "b": _o(["runtime_error", "ok"], [0.0, 0.4], best=[None, 0.4]),
                "c": _o(["ok", "ok"], [0.5, 0.5])}
    best = aggregate(_proto(episode_score="best_turn", failure_score=0.1), outcomes, 2)["per_task"]
    # best turn: a failed final submission still scores its best graded turn; no graded turn -> failure score
    assert best["a"]["scores"] == [0.7, 0.5] and best["b"]["scores"] == [0.1, 0.4]
    final = aggregate(_proto(failure_score=0.1), outcomes, 2)["per_task"]
    assert final["a"]["scores"] == [0.2, 0.1] and final["b"]["scores"] == [0.1, 0.4]


def test_infra_failures_count_as_failures_and_make_the_result_not_comparable():
    outcomes = {"a": _o(["ok", "infra_error"], [0.6, None]), "b": _o(["ok", "ok"], [0.2, 0.4]),
                "c": _o(["ok", "ok"], [0.0, 0.0])}
    res = aggregate(_proto(), outcomes, 2)
    assert res["per_task"]["a"] | {"scores": None} == {"category": "tab", "avg_at_k": 0.3, "scores": None, "n": 2,
                                                        "n_failed": 0, "n_infra": 1}
    assert not res["comparable"] and "infrastructure failure" in res["not_comparable"][0]


def test_missing_competitions_are_listed_and_not_comparable():
    res = aggregate(_proto(), {"a": _o(["ok"], [0.5]), "c": _o(["ok"], [1.0])}, 1, missing=["b"])
    assert res["missing"] == ["b"] and not res["comparable"]
    assert res["not_comparable"] == ["1 of the protocol's 3 competitions were not evaluated: b"]
    assert res["categories"]["tab"] == {"mean": 0.5, "n_tasks": 1, "tasks": ["a"]}


def test_a_competition_the_scaffold_cannot_write_scores_the_failure_score_on_every_sample():
    """As the reference implementation scores a failed submission: failure_score, counted in both means."""
    why = "scaffold 'grammar' fills a program template: its submission is the sample submission's table"
    res = aggregate(_proto(failure_score=0.1), {"a": _o(["ok", "ok"], [0.5, 0.7]), "c": _o(["ok", "ok"], [1.0, 1.0])},
                    2, unwritable={"b": why})
    assert res["per_task"]["b"] == {"category": "tab", "avg_at_k": 0.1, "scores": [0.1, 0.1], "n": 2, "n_failed": 2,
                                    "n_infra": 0, "not_run": why}
    assert list(res["per_task"]) == ["a", "b", "c"] and res["n_tasks"] == 3 and res["missing"] == []
    assert res["categories"]["tab"]["mean"] == pytest.approx((0.6 + 0.1) / 2)
    assert res["task_mean"] == pytest.approx((0.6 + 0.1 + 1.0) / 3) and res["unwritable"] == {"b": why}
    assert res["comparable"] and res["n_failed"] == 2


def test_without_categories_every_task_is_in_one_category():
    p = EvalProtocol(name="plain")
    res = aggregate(p, {"x": _o(["ok", "ok"], [0.2, 0.6]), "y": _o(["ok", "timeout"], [1.0, 0.0])}, 2)
    assert list(res["categories"]) == [ALL] and res["categories"][ALL]["tasks"] == ["x", "y"]
    assert res["category_mean"] == res["task_mean"] == pytest.approx((0.4 + 0.5) / 2)


def test_aggregate_refuses_wrong_sample_counts_and_tasks_without_a_category():
    with pytest.raises(ValueError, match="expected 3 samples"):
        aggregate(_proto(), {"a": _o(["ok", "ok"], [0.1, 0.2])}, 3)
    with pytest.raises(ValueError, match="no task"):
        aggregate(_proto(), {}, 1)
    with pytest.raises(ConfigError, match="no category for task 'z'"):
        aggregate(_proto(), {"z": _o(["ok"], [0.1])}, 1)


def test_sample_score_kinds():
    p = _proto(failure_score=0.25)
    assert sample_score(p, "ok", 0.9, 0.9) == (0.9, "ok")
    assert sample_score(p, "runtime_error", 0.0, None) == (0.25, "failed")
    assert sample_score(p, "infra_error", None, None) == (0.25, "infra")
    assert sample_score(p, "ok", math.nan, None) == (0.25, "infra")


def test_sample_outcomes_groups_by_task_in_sample_order():
    got = sample_outcomes(["b", "a", "b"], ["ok", "infra_error", "timeout"], [0.5, None, float("nan")],
                          [0.5, None, None])
    assert got == {"a": {"status": ["infra_error"], "reward": [None], "best_valid_reward": [None]},
                   "b": {"status": ["ok", "timeout"], "reward": [0.5, None], "best_valid_reward": [0.5, None]}}
    with pytest.raises(ValueError, match="one entry per sample"):
        sample_outcomes(["a"], ["ok", "ok"], [0.1], [0.1])


# ------------------------------------------------------------------------------------------------ the paper's

def test_the_paper_protocol_holds_the_reference_settings_and_split():
    assert "paper" in protocol_names() and get_protocol("paper") is PAPER
    assert (PAPER.samples_per_task, PAPER.max_turns, PAPER.temperature, PAPER.top_p, PAPER.max_new_tokens,
            PAPER.time_limit_s) == (8, 4, 0.8, 1.0, 4096, 600.0)
    assert (PAPER.episode_score, PAPER.failure_score, PAPER.score, PAPER.overall) == (
        "best_turn", 0.0, "percentile", "category_mean")
    assert len(PAPER.split) == len(set(PAPER.split)) == 14
    cats = [PAPER.category_of(t) for t in PAPER.split]
    assert PAPER.category_order(PAPER.split) == ["tabular", "text", "image"]
    assert (cats.count("tabular"), cats.count("text"), cats.count("image")) == (5, 4, 5)
    assert PAPER.category_of("AI4Code") == "text" and PAPER.category_of("bengaliai-cv19") == "image"


def test_the_paper_table_avg_is_the_mean_of_its_category_means():
    # The paper's 4B GRPO row: Tab 24.8, Text 16.6, Img 4.3 -> Avg 15.2 (a mean over 14 tasks would be 15.1).
    per_cat = {"tabular": 0.248, "text": 0.166, "image": 0.043}
    outcomes = {t: _o(["ok"], [per_cat[PAPER.category_of(t)]]) for t in PAPER.split}
    res = aggregate(PAPER, outcomes, 1)
    assert round(100 * res["overall"], 1) == 15.2 and round(100 * res["task_mean"], 1) == 15.1


# ------------------------------------------------------------------------------------------------ registry, YAML

def test_register_and_get_a_protocol_of_ones_own():
    p = register_protocol(EvalProtocol(name="mine-test", samples_per_task=2), replace=True)
    assert get_protocol("mine-test") is p and "mine-test" in protocol_names()
    with pytest.raises(ValueError, match="registered already"):
        register_protocol(EvalProtocol(name="mine-test"))
    with pytest.raises(ValueError, match="built in"):
        register_protocol(EvalProtocol(name="paper"), replace=True)


def test_unknown_protocol_names_the_registered_ones():
    with pytest.raises(ConfigError, match=r"unknown protocol 'papr'\. Did you mean 'paper'\? Registered: default, pap"):
        get_protocol("papr")


def test_yaml_protocol_loads_with_its_stem_as_name(tmp_path):
    f = tmp_path / "two-by-two.yaml"
    f.write_text("split: [dojo-a, dojo-b]\ncategories: {dojo-a: tabular, dojo-b: text}\nsamples_per_task: 2\n"
                 "max_turns: 2\ntemperature: 0.8\noverall: category_mean\n")
    p = get_protocol(str(f))
    assert (p.name, p.split, p.samples_per_task, p.max_turns, p.overall) == (
        "two-by-two", ["dojo-a", "dojo-b"], 2, 2, "category_mean")


@pytest.mark.parametrize("text, message", [
    ("name: x\nsamples: 2\n", "unknown config key 'samples'. Did you mean 'samples_per_task'?"),
    ("name: x\nsamples_per_task: 0\n", "samples_per_task: 0 is below the minimum 1"),
    ("name: x\ntemperature: hot\n", "temperature: expected a number or null, got 'hot'"),
    ("name: x\ntemperature: .inf\n", "temperature: inf is not allowed"),
    ("name: x\nepisode_score: best\n", "episode_score: 'best' is not allowed; choose one of 'final', 'best_turn'"),
    ("name: x\nsplit: [a, a]\n", "split: a given more than once"),
    ("name: x\nsplit: []\n", "split: an empty list"),
    ("name: x\nsplit: [a, b]\ncategories: {a: tab}\n", "categories: no category for b"),
    ("name: x\nsplit: [a]\ncategories: {a: tab, c: img}\n", "categories: c not in the split"),
    ("name: x\ncategories: {a: 5}\n", "categories: task ids and categories must be text"),
    ("name: x\noverall: category_mean\n", "overall: 'category_mean' needs categories"),
    ("name: x y\n", "name: 'x y' is not a protocol name"),
    ("name: x\nname: y\n", "key 'name' is given twice"),
    ("name: x\nsplit: [a\n", "cannot parse"),
    ("- 1\n- 2\n", "the top level must be a mapping"),
])
def test_bad_yaml_protocols_are_refused_naming_the_problem(tmp_path, text, message):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_protocol(f)
    assert message in str(e.value) and str(f) in str(e.value)


def test_missing_files_and_folders_are_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        get_protocol(str(tmp_path / "nope.yaml"))
    with pytest.raises(ConfigError, match="is a folder"):
        load_protocol(tmp_path)
    with pytest.raises(ConfigError, match="name: missing"):
        protocol_from_dict({"split": ["a"]})


def test_the_protocol_tables_show_percent_and_mark_the_overall_number():
    from io import StringIO

    from rich.console import Console

    from wmrl.training.cli import protocol_tables

    res = aggregate(_proto(overall="category_mean"), {"a": _o(["ok"], [0.5]), "c": _o(["ok"], [0.25])}, 1,
                    missing=["b"])
    buf = StringIO()
    console = Console(file=buf, width=200)
    for t in protocol_tables(res):
        console.print(t)
    text = " ".join(buf.getvalue().split())
    assert "avg@1 per task (%)" in text and "NOT COMPARABLE" in text
    assert "│ a │ tab │ 50.0 │ 0 │ 0 │" in text and "│ b │ │ missing │" in text
    assert "│ Avg (mean over categories) = overall │ 2 │ 37.5 │" in text
    assert "│ mean over tasks │ 2 │ 37.5 │" in text
