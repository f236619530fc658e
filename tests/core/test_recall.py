"""Recalled executions in the recipe: a world-model sample with a measured reward trains on it."""
import numpy as np

from wmrl.core.recipe import StepInputs, get_recipe


def _inputs(recalled, step=3):
    gid = np.repeat(np.arange(3), 4)
    anc = gid == 0
    rt = np.where(anc, np.linspace(0.1, 0.9, 12), np.nan)
    rw = np.linspace(0.5, 0.6, 12)
    return StepInputs(step=step, group_ids=gid, is_anchor=anc, valid=np.ones(12, bool), reward_true=rt,
                      reward_wm=rw, reward_recalled=recalled)


def test_a_recalled_world_model_sample_trains_on_its_measured_reward_and_the_calibration_ignores_it():
    rec = np.full(12, np.nan)
    rec[[5, 9]] = [0.05, 0.99]
    rec[1] = 0.0  # on an anchor: the anchor's own execution wins
    r = get_recipe("wmrl")
    plain = r.step(_inputs(None), r.init_state())
    s1 = r.init_state()
    out = r.step(_inputs(rec), s1)
    assert out.reward_used[5] == 0.05 and out.reward_used[9] == 0.99
    assert out.reward_used[1] == plain.reward_used[1]
    others = np.setdiff1d(np.arange(12), [5, 9])
    np.testing.assert_array_equal(out.reward_used[others], plain.reward_used[others])
    np.testing.assert_array_equal(out.reward_wm_calibrated, plain.reward_wm_calibrated)  # r_tilde unchanged
    assert out.stats["n_recalled"] == 2
    assert out.advantages[5] < plain.advantages[5] and out.advantages[9] > plain.advantages[9]
    s0 = r.init_state()
    r.step(_inputs(None), s0)
    assert s1.state_dict() == s0.state_dict()  # the window and the calibrator saw the anchors only


def test_a_recipe_without_recall_ignores_measured_rewards():
    rec = np.full(12, np.nan)
    rec[5] = 0.05
    for name in ("wmrl-no-recall", "wmrl-raw", "wm"):
        r = get_recipe(name)
        x = _inputs(rec)
        if name == "wm":
            x = StepInputs(step=3, group_ids=x.group_ids, is_anchor=np.zeros(12, bool), valid=x.valid,
                           reward_true=np.full(12, np.nan), reward_wm=x.reward_wm, reward_recalled=rec)
        out = r.step(x, r.init_state())
        assert out.reward_used[5] != 0.05 and out.stats["n_recalled"] == 0


def test_ppi_uses_the_recalled_reward_on_world_model_rows():
    rec = np.full(12, np.nan)
    rec[5] = 0.05
    r = get_recipe("wmrl-ppi")
    st = r.init_state()
    r.step(_inputs(None, step=2), st)  # a first step fills the window, so lambda > 0 at the second
    out = r.step(_inputs(rec), st)
    assert out.reward_used[5] == 0.05 and out.stats["ppi_lambda"] > 0
