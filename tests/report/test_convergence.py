"""Where a run converged (wmrl.report.convergence): the pure table on small hand-made inputs whose answer is
known, and its rendering (wmrl.report.convergence_page)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from wmrl.report import convergence as C
from wmrl.report import convergence_page as CV

GB, LASSO, RIDGE, NB = "GradientBoosting()", "Lasso(alpha=0.001)", "Ridge()", "GaussianNB()"


def executions(rows):
    return pd.DataFrame(rows, columns=["task_id", "completion", "reward"])


def samples(task, progs_rewards):
    return executions([(task, p, r) for p, r in progs_rewards])


@pytest.fixture()
def candidates():
    # task t: GB truly best (0.97, executed twice); the others lower. Task u: one program only.
    return C.candidate_programs(executions([
        ("t", GB, 0.96), ("t", GB, 0.98), ("t", LASSO, 0.736), ("t", RIDGE, 0.70), ("t", NB, 0.40),
        ("t", NB, None), ("t", "crashed()", None), ("u", RIDGE, 0.5),
    ]))


def scorer(table, calls=None):
    def score(task_ids, completions):
        if calls is not None:
            calls.append(list(zip(task_ids, completions)))
        return np.array([table[(t, c)] for t, c in zip(task_ids, completions)], dtype=np.float64)
    return score


WM = {("t", LASSO): 0.90, ("t", RIDGE): 0.80, ("t", GB): 0.70, ("t", NB): 0.10, ("t", "crashed()"): 0.95,
      ("u", RIDGE): 0.4}


def test_candidates_average_repeats_and_drop_executions_without_reward(candidates):
    t = candidates.set_index(["task_id", "completion"])
    assert t.loc[("t", GB), "true_reward"] == pytest.approx(0.97) and t.loc[("t", GB), "n_executions"] == 2
    assert t.loc[("t", NB), "n_executions"] == 1  # the execution without a reward is left out
    assert ("t", "crashed()") not in t.index
    assert len(candidates) == 5 and candidates["n_executions"].dtype == np.int64
    assert (candidates["found_in"] == "").all()  # no source column
    ex = executions([("t", GB, 0.9), ("t", GB, 0.8)]).assign(source=["grpo seed 0", "corpus"])
    assert C.candidate_programs(ex)["found_in"].tolist() == ["corpus, grpo seed 0"]


def test_modal_program_share_and_true_reward():
    m = C.modal_programs(pd.concat([
        samples("t", [(LASSO, 0.73), (LASSO, 0.74), (LASSO, None), (GB, 0.97)]),
        samples("u", [(RIDGE, 0.5), (NB, 0.2)]),  # a tie: the first in lexicographic order wins
    ])).set_index("task_id")
    assert m.loc["t", "modal_program"] == LASSO and m.loc["t", "modal_n"] == 3 and m.loc["t", "n_samples"] == 4
    assert m.loc["t", "modal_share"] == pytest.approx(0.75)
    assert m.loc["t", "modal_true"] == pytest.approx(0.735)  # the sample without a reward is left out
    assert m.loc["u", "modal_program"] == NB == sorted([RIDGE, NB])[0]


def test_modal_is_the_world_models_favourite_but_not_the_best_is_wm_led(candidates):
    modal = C.modal_programs(samples("t", [(LASSO, 0.736)] * 6 + [(GB, 0.97)] * 2))
    calls = []
    rows = C.convergence_rows(candidates, modal, score=scorer(WM, calls))
    r = rows.iloc[0]
    assert r["verdict"] == "wm-led"
    assert r["modal_program"] == LASSO and r["modal_share"] == pytest.approx(0.75)
    assert r["modal_true"] == pytest.approx(0.736) and r["modal_pred"] == pytest.approx(0.90)
    assert r["best_program"] == GB and r["best_true"] == pytest.approx(0.97) and r["best_n_executions"] == 2
    # candidates ranked by r_hat: Lasso 0.9, Ridge 0.8, GB 0.7, NB 0.1 -> the best program is third
    assert r["modal_rank"] == 1 and r["best_rank"] == 3 and r["n_candidates"] == 4
    assert r["wm_favourite_program"] == LASSO and r["wm_favourite_true"] == pytest.approx(0.736)
    assert r["shortfall"] == pytest.approx(0.97 - 0.736)
    assert len(calls) == 1 and len(calls[0]) == 4  # one batch: every candidate of the task once
    assert list(rows.columns) == list(C.ROW_COLUMNS)


def test_within_tolerance_of_the_best_is_best(candidates):
    cands = pd.concat([candidates, pd.DataFrame([{"task_id": "t", "completion": "GB2()", "true_reward": 0.955,
                                                   "n_executions": 1}])], ignore_index=True)
    table = {**WM, ("t", "GB2()"): 0.99}
    rows = C.convergence_rows(cands, C.modal_programs(samples("t", [("GB2()", 0.955)] * 4)), score=scorer(table))
    assert rows.iloc[0]["verdict"] == "best" and rows.iloc[0]["modal_rank"] == 1
    # 0.97 - 0.949 = 0.021 > 0.02: no longer best; the world model scores it above GB -> wm-led
    cands.loc[cands["completion"] == "GB2()", "true_reward"] = 0.949
    rows = C.convergence_rows(cands, C.modal_programs(samples("t", [("GB2()", 0.949)] * 4)), score=scorer(table))
    assert rows.iloc[0]["verdict"] == "wm-led"
    # the modal program is the best program itself: best, whatever its evaluation samples scored
    rows = C.convergence_rows(candidates, C.modal_programs(samples("t", [(GB, 0.90)] * 4)), score=scorer(WM))
    assert rows.iloc[0]["verdict"] == "best" and rows.iloc[0]["best_rank"] == 3


def test_world_model_prefers_the_best_but_the_policy_stopped_short_is_other(candidates):
    rows = C.convergence_rows(candidates, C.modal_programs(samples("t", [(NB, 0.40)] * 4)), score=scorer(WM))
    r = rows.iloc[0]
    assert r["verdict"] == "other" and r["modal_rank"] == 4 and r["best_rank"] == 3


def test_without_a_world_model_only_true_rewards(candidates):
    modal = C.modal_programs(pd.concat([samples("t", [(LASSO, 0.736)] * 4), samples("u", [(RIDGE, 0.5)] * 2)]))
    rows = C.convergence_rows(candidates, modal).set_index("task_id")
    assert list(rows["verdict"]) == ["other", "best"]
    assert rows["modal_pred"].isna().all() and rows["best_rank"].isna().all()
    assert rows["wm_favourite_program"].isna().all()
    assert rows.loc["t", "best_program"] == GB


def test_no_reward_or_no_candidate_is_na(candidates):
    modal = C.modal_programs(pd.concat([samples("t", [("crashed()", None)] * 3), samples("v", [(GB, 0.9)])]))
    rows = C.convergence_rows(candidates, modal, score=scorer({**WM, ("v", GB): 0.5})).set_index("task_id")
    assert rows.loc["t", "verdict"] == "n/a" and math.isnan(rows.loc["t", "modal_true"])
    # a modal program that is no candidate is still ranked against the candidates (0.95 beats all four)
    assert rows.loc["t", "modal_rank"] == 1 and rows.loc["t", "best_program"] == GB
    assert rows.loc["v", "verdict"] == "n/a" and rows.loc["v", "n_candidates"] == 0


def test_ties_share_the_better_rank_and_calibration_is_applied(candidates):
    flat = {k: 0.5 for k in WM}
    rows = C.convergence_rows(candidates, C.modal_programs(samples("t", [(LASSO, 0.736)] * 2)), score=scorer(flat),
                              calibrate=lambda x: 2 * x - 0.25)
    r = rows.iloc[0]
    assert r["modal_rank"] == 1 and r["best_rank"] == 1
    assert r["verdict"] == "other"  # equal predictions: the world model does not score the modal program above
    assert r["wm_favourite_program"] == GB  # tie broken by the higher true reward
    assert r["modal_pred_calibrated"] == pytest.approx(0.75) and r["best_pred_calibrated"] == pytest.approx(0.75)


def test_a_scorer_of_the_wrong_shape_is_refused(candidates):
    modal = C.modal_programs(samples("t", [(LASSO, 0.736)]))
    with pytest.raises(ValueError, match="shape"):
        C.convergence_rows(candidates, modal, score=lambda t, c: np.zeros(1))
    with pytest.raises(ValueError, match="non-finite"):
        C.convergence_rows(candidates, modal, score=lambda t, c: np.full(len(c), np.nan))


def test_verdict_rule_by_hand():
    assert C.verdict(0.96, 0.97, False, None, None) == "best"
    assert C.verdict(0.90, 0.97, False, None, None) == "other"
    assert C.verdict(0.90, 0.97, False, 0.8, 0.7) == "wm-led"
    assert C.verdict(0.90, 0.97, False, 0.7, 0.7) == "other"
    assert C.verdict(math.nan, 0.97, False, 0.8, 0.7) == "n/a"
    assert C.rank_of(0.5, np.array([0.9, 0.5, 0.5, 0.1])) == 2


def _docs(candidates):
    modal = C.modal_programs(samples("t", [(LASSO, 0.736)] * 4))
    wm = C.convergence_rows(candidates, modal, score=scorer(WM))
    grpo = C.convergence_rows(candidates, C.modal_programs(samples("t", [(GB, 0.97)] * 4)))
    return [{"method": "grpo", "seed": 0, "world_model": {"uses": False, "loaded": False},
             "tasks": grpo.to_dict("records"), "notes": []},
            {"method": "wm", "seed": 0, "world_model": {"uses": True, "loaded": True}, "tasks": wm.to_dict("records"),
             "notes": ["a note"], "n_scored": 4, "score_seconds": 0.5}]


def test_counts_and_the_tables(candidates):
    docs = _docs(candidates)
    frame = CV.convergence_frame(docs)
    assert list(frame[["method", "verdict"]].itertuples(index=False, name=None)) == [("grpo", "best"), ("wm", "wm-led")]
    counts = C.verdict_counts(frame).set_index("method")
    assert counts.loc["wm", "wm-led"] == 1 and counts.loc["grpo", "best"] == 1 and counts.loc["wm", "tasks"] == 1
    assert counts.loc["wm", "modal_is_favourite"] == 1 and pd.isna(counts.loc["grpo", "modal_is_favourite"])
    table = CV.per_run_table(frame).to_frame().set_index("method")
    assert table.loc["wm", "verdict"] == "wm-led" and table.loc["wm", "best WM rank"] == "3 / 4"
    assert table.loc["grpo", "modal r_hat"] == "" and table.loc["wm", "modal r_hat"] == "0.900"
    assert "modal f_hat" not in table.columns  # no calibrated predictions anywhere
    summary = CV.summary_table(frame).to_frame().set_index("method")
    assert summary.loc["wm", "wm-led"] == "1" and summary.loc["wm", "modal = WM favourite"] == "1 / 1"
    line = CV.wm_led_sentence(frame, docs)
    assert "wm 1 of 1" in line and "grpo — (no world model)" in line and "grpo 1 of 1; wm 0 of 1" in line
    assert CV.notes(docs) == ["wm seed 0: a note"] and "4 program predictions" in CV.timing_text(docs)


def test_program_label():
    assert CV.program_label("make_pipeline(\n  Lasso())") == "make_pipeline( Lasso())"
    long = "x" * 50 + "MIDDLE" + "y" * 50
    lab = CV.program_label(long, width=40)
    assert len(lab) == 40 and lab.startswith("xxx") and lab.endswith("yyy") and "…" in lab
    assert CV.program_label(None) == ""
