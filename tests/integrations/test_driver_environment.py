"""The integrations' driver builds its environment through the environment registry, like the text trainer: a
registered text environment is the one its steps run on, and an unknown name is refused in one line naming the
registered ones."""
from types import SimpleNamespace

import numpy as np
import pytest
from tests.integrations.test_driver_recall import _Executor, _Scaffold, _WorldModel

from wmrl.integrations.driver import WMRLDriver
from wmrl.step.environment import ENVIRONMENTS, register_environment
from wmrl.step.kaggle import KaggleEnvironment


class _CountingEnvironment(KaggleEnvironment):
    """The Kaggle environment that counts the trajectories it submitted."""

    name = "counting-kaggle"
    submitted = 0

    def submit(self, rollouts, idx):
        type(self).submitted += len(idx)
        return super().submit(rollouts, idx)


@pytest.fixture
def _registered():
    register_environment("counting-kaggle")(_CountingEnvironment)
    yield
    ENVIRONMENTS.unregister("counting-kaggle")


def test_the_driver_steps_on_the_environment_named(_registered):
    tasks = [SimpleNamespace(id=f"t{i}") for i in range(2)]
    d = WMRLDriver(tasks, _Scaffold(), _WorldModel(), _Executor(), method="grpo", seed=0,
                   environment="counting-kaggle")
    assert isinstance(d.env, _CountingEnvironment)
    d.step(1, ["t0", "t0", "t1", "t1"], ["p"] * 4, ["aa", "ab", "ac", "ad"], np.asarray([0, 0, 1, 1]))
    assert _CountingEnvironment.submitted == 4  # grpo: every group an anchor, submitted through it


def test_an_unknown_environment_is_refused_in_one_line():
    with pytest.raises(ValueError) as e:
        WMRLDriver([SimpleNamespace(id="t0")], _Scaffold(), _WorldModel(), _Executor(), environment="kagle")
    assert "\n" not in str(e.value) and "kaggle" in str(e.value)
