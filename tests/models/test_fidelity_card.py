"""The fidelity card (wmrl.world_model.fidelity) on small fixed inputs, figures computed by hand."""
from __future__ import annotations

import json

import numpy as np
import pytest

from wmrl.world_model.fidelity import FIGURES, FidelityCard, FidelityRows, fidelity_card, format_card
from wmrl.world_model.outcome import STATUS_CLASSES, OutcomePrediction

# columns of status_probs: syntax_error, runtime_error, no_submission, valid
PROBS = [
    [0.10, 0.10, 0.10, 0.70],  # 0 group A, valid:          top-1 valid ✓
    [0.10, 0.20, 0.10, 0.60],  # 1 group A, valid:          top-1 valid ✓
    [0.10, 0.50, 0.00, 0.40],  # 2 group B, runtime_error:  top-1 runtime ✓
    [0.10, 0.60, 0.00, 0.30],  # 3 group B, valid:          top-1 runtime ✗, top-2 {runtime, valid} ✓
    [0.30, 0.20, 0.45, 0.05],  # 4 group C, syntax_error:   top-1 no_submission ✗, top-2 {no_sub, syntax} ✓
    [0.50, 0.30, 0.10, 0.10],  # 5 group C, no_submission:  top-1 syntax ✗, top-2 {syntax, runtime} ✗
    [0.00, 0.00, 0.00, 1.00],  # 6 group D, infrastructure error: dropped
]
REWARD = [0.7, 0.5, 0.3, 0.2, 0.1, 0.05, 0.9]
TRUE = [0.8, 0.4, 0.0, 0.6, 0.0, 0.0, float("nan")]
CLASSES = ["valid", "valid", "runtime_error", "valid", "syntax_error", "no_submission", None]
GROUPS = ["A", "A", "B", "B", "C", "C", "D"]


def pred(rows=slice(None)):
    return OutcomePrediction(np.array(REWARD)[rows], np.array(PROBS)[rows], np.zeros(len(REWARD))[rows])


def test_figures_by_hand():
    c = fidelity_card(pred(), TRUE, CLASSES, GROUPS, n_boot=0, ece_bins=3)
    assert (c.n, c.n_groups, c.n_dropped, c.n_pairs) == (6, 3, 1, 2)
    assert c.status_acc1.value == pytest.approx(3 / 6)
    assert c.status_acc2.value == pytest.approx(5 / 6)
    # P(fail) of the failures 0.6, 0.95, 0.9 against the valid ones 0.3, 0.4, 0.7: 2 + 3 + 3 of 9 pairs ordered
    assert c.failure_auc.value == pytest.approx(8 / 9)
    assert c.mae.value == pytest.approx((0.1 + 0.1 + 0.3 + 0.4 + 0.1 + 0.05) / 6)
    # equal-mass bins of the prediction: {0.05, 0.1} true {0, 0}; {0.2, 0.3} true {0.6, 0}; {0.5, 0.7} true {0.4, 0.8}
    assert c.ece.value == pytest.approx(2 / 6 * (0.075 + 0.05 + 0.0))
    # group A ordered right, group B wrong, group C has one true reward only: no pair
    assert c.pairwise_acc.value == pytest.approx(0.5)
    # ranks: prediction 6 5 4 3 2 1; truth 6 4 2 5 2 2 (the three zeros share rank 2)
    assert c.spearman.value == pytest.approx(np.corrcoef([6, 5, 4, 3, 2, 1], [6, 4, 2, 5, 2, 2])[0, 1])
    assert c.truth_mix == pytest.approx({"syntax_error": 1 / 6, "runtime_error": 1 / 6, "no_submission": 1 / 6,
                                         "valid": 3 / 6})
    assert c.pred_mix == pytest.approx(dict(zip(STATUS_CLASSES, np.array(PROBS[:6]).mean(0))))
    assert c.pred_top_mix == pytest.approx({"syntax_error": 1 / 6, "runtime_error": 2 / 6, "no_submission": 1 / 6,
                                            "valid": 2 / 6})
    assert all(c.figure(f).lo is None and c.figure(f).hi is None for f in FIGURES)  # no bootstrap asked
    assert c.status_available and not c.notes


def test_ties_in_the_status_distribution_go_to_the_first_class():
    probs = [[0.4, 0.4, 0.1, 0.1], [0.25, 0.25, 0.25, 0.25]]
    c = fidelity_card(OutcomePrediction(np.zeros(2), np.array(probs), np.zeros(2)), [0.0, 0.0],
                      ["runtime_error", "no_submission"], [0, 1], n_boot=0)
    assert c.status_acc1.value == 0.0  # syntax_error wins both ties
    assert c.status_acc2.value == 0.5  # runtime_error is second in the first row; no_submission is third


def test_a_world_model_without_status_probabilities_gets_reward_figures_only():
    c = fidelity_card(np.array(REWARD), TRUE, CLASSES, GROUPS, n_boot=50, ece_bins=3)
    assert not c.status_available and c.pred_mix is None and c.pred_top_mix is None
    assert all(c.figure(f).value is None for f in ("status_acc1", "status_acc2", "failure_auc"))
    assert c.mae.value == pytest.approx(1.05 / 6) and c.pairwise_acc.value == pytest.approx(0.5)
    assert any("status" in n for n in c.notes)
    assert "n/a" in format_card(c)


def test_failure_auc_is_none_with_one_class_only_and_says_why():
    c = fidelity_card(pred(slice(0, 2)), TRUE[:2], CLASSES[:2], GROUPS[:2], n_boot=20)
    assert c.failure_auc.value is None and c.failure_auc.lo is None
    assert any("every program's true class is valid" in n for n in c.notes)
    assert c.status_acc1.value == 1.0


def test_bootstrap_is_seeded_and_its_interval_holds_the_point():
    rng = np.random.default_rng(1)
    n, g = 240, 60
    true_cls = rng.integers(0, 4, n)
    probs = rng.dirichlet(np.ones(4), n)
    probs[np.arange(n), true_cls] += 0.3  # an informative status distribution
    probs /= probs.sum(1, keepdims=True)
    true = np.where(true_cls == 3, rng.random(n), 0.0)
    p = OutcomePrediction(np.clip(true + rng.normal(0, 0.2, n), 0, 1), probs, np.zeros(n))
    cls, groups = [STATUS_CLASSES[i] for i in true_cls], [i // (n // g) for i in range(n)]
    a = fidelity_card(p, true, cls, groups, n_boot=300, seed=7)
    b = fidelity_card(p, true, cls, groups, n_boot=300, seed=7)
    other = fidelity_card(p, true, cls, groups, n_boot=300, seed=8)
    assert a == b
    assert a.to_dict() != other.to_dict()
    for f in FIGURES:
        fig = a.figure(f)
        assert fig.lo is not None and fig.lo < fig.hi, f
    for f in ("status_acc1", "status_acc2", "failure_auc", "mae", "spearman", "pairwise_acc"):
        assert a.figure(f).lo <= a.figure(f).value <= a.figure(f).hi, f
    assert a.status_acc1.lo > 0.25 and a.failure_auc.lo > 0.5  # the signal put in is found (chance: 1/4, 1/2)


def test_the_bootstrap_resamples_whole_groups():
    """Every group holds one right and one wrong status guess: a resample of groups always scores 1/2, so the
    interval collapses to the point (a resample of single programs would spread it)."""
    k = 10
    probs = np.tile([[0.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0]], (k, 1))
    p = OutcomePrediction(np.tile([0.6, 0.2], k), probs, np.zeros(2 * k))
    c = fidelity_card(p, np.tile([0.5, 0.4], k), ["valid"] * (2 * k), [i // 2 for i in range(2 * k)], n_boot=200)
    assert (c.status_acc1.value, c.status_acc1.lo, c.status_acc1.hi) == (0.5, 0.5, 0.5)
    assert (c.pairwise_acc.value, c.pairwise_acc.lo, c.pairwise_acc.hi) == (1.0, 1.0, 1.0)
    assert c.n_groups == k and c.n_pairs == k


def test_card_round_trips_through_json_and_prints():
    c = fidelity_card(pred(), TRUE, CLASSES, GROUPS, n_boot=30, ece_bins=3)
    back = FidelityCard.from_dict(json.loads(json.dumps(c.to_dict())))
    assert back == c
    text = " ".join(format_card(c).split())
    assert "6 programs in 3 groups (1 without an outcome class dropped" in text
    assert "status accuracy @1 0.500 [" in text and "reward ECE (3 equal-mass bins)" in text
    with pytest.raises(ValueError, match="missing"):
        FidelityCard.from_dict({"figures": {}})


@pytest.mark.parametrize("args, match", [
    ((pred(), TRUE[:3], CLASSES, GROUPS), "one true reward, true class and group id per prediction"),
    ((pred(), TRUE, CLASSES[:5], GROUPS), "7 predictions"),
    ((pred(), TRUE, CLASSES, GROUPS[:2]), "2 group ids"),
    ((np.zeros(0), [], [], []), "at least one executed program"),
    ((pred(slice(6, 7)), TRUE[6:], CLASSES[6:], GROUPS[6:]), "infrastructure errors"),
    ((pred(slice(0, 1)), [0.5], ["crashed"], ["A"]), "unknown outcome class 'crashed'"),
    ((pred(slice(0, 1)), [float("nan")], ["valid"], ["A"]), "no finite true reward"),
    ((np.array([np.nan]), [0.5], ["valid"], ["A"]), "predicted rewards are not finite"),
    ((np.zeros((2, 2)), [0.5, 0.5], ["valid"] * 2, [0, 1]), "OutcomePrediction or \\[N\\] predicted rewards"),
])
def test_bad_input_is_a_clear_error(args, match):
    with pytest.raises(ValueError, match=match):
        fidelity_card(*args, n_boot=0)


@pytest.mark.parametrize("kw, match", [({"n_boot": -1}, "n_boot must be an integer >= 0"),
                                       ({"ece_bins": 0}, "ece_bins must be an integer >= 1")])
def test_bad_settings_are_clear_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        fidelity_card(pred(), TRUE, CLASSES, GROUPS, **kw)


def test_rows_collected_step_by_step_give_the_same_card_and_survive_a_checkpoint():
    rows = FidelityRows()
    assert rows.card() is None
    groups = [(1, 0), (1, 0), (1, 1), (1, 1), (2, 0), (2, 0), (2, 1)]
    rows.add(pred(slice(0, 4)), TRUE[:4], CLASSES[:4], groups[:4])
    rows.add(pred(slice(4, 7)), TRUE[4:], CLASSES[4:], groups[4:])
    whole = fidelity_card(pred(), TRUE, CLASSES, groups, n_boot=40, seed=3)
    assert rows.card(n_boot=40, seed=3) == whole
    again = FidelityRows()
    again.load_state_dict(json.loads(json.dumps(rows.state_dict()).replace("NaN", "null")))
    assert again.card(n_boot=40, seed=3) == whole
    rows.add(np.array([0.5]), [0.5], ["valid"], [(3, 0)])  # a reward-only row: no status figures from now on
    assert rows.card().status_acc1.value is None and rows.card().mae.value is not None
    with pytest.raises(ValueError, match="1 predictions with 2 true rewards"):
        rows.add(np.array([0.5]), [0.5, 0.1], ["valid"], [(3, 0)])


def test_ranking_figures_by_hand_and_an_old_card_without_them_still_loads():
    # group a: the world model reverses the order of three programs (tau-b = -1), its favourite (0.9) is the worst
    # (true 0.2) of a best 0.8: regret 0.6. Group b: the same order on both sides (tau-b = 1), regret 0. Group c:
    # one program, defining neither figure.
    pred = [0.1, 0.5, 0.9, 0.2, 0.7, 0.4]
    true = [0.8, 0.5, 0.2, 0.1, 0.6, 0.3]
    groups = ["a", "a", "a", "b", "b", "c"]
    card = fidelity_card(pred, true, ["valid"] * 6, groups, n_boot=50, seed=0)
    assert card.kendall_tau.value == pytest.approx(0.0)
    assert card.favourite_regret.value == pytest.approx(0.3)
    assert card.kendall_tau.lo == pytest.approx(-1.0) and card.kendall_tau.hi == pytest.approx(1.0)
    one = fidelity_card(pred[:3], true[:3], ["valid"] * 3, groups[:3], n_boot=0)
    assert (one.kendall_tau.value, one.favourite_regret.value) == (pytest.approx(-1.0), pytest.approx(0.6))
    single = fidelity_card([0.3], [0.4], ["valid"], ["c"], n_boot=0)
    assert single.kendall_tau.value is None and single.favourite_regret.value is None
    assert any("Kendall" in n for n in single.notes)
    old = card.to_dict()
    for name in ("kendall_tau", "favourite_regret"):
        del old["figures"][name]
    loaded = FidelityCard.from_dict(old)
    assert loaded.kendall_tau.value is None and loaded.pairwise_acc == card.pairwise_acc
    assert "Kendall tau-b in groups" in format_card(card)
