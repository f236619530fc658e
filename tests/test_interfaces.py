"""The protocols of wmrl.interfaces are the real ones: every implementation has every member the trainer
and the policy use, and the test doubles of the trainer's tests do too (so the fakes cannot drift)."""
from __future__ import annotations


import pytest

from wmrl import interfaces as I


def _members(proto) -> set[str]:
    names = set(getattr(proto, "__annotations__", {}))
    names |= {k for k, v in vars(proto).items() if callable(v) and not k.startswith("_")}
    return names


def _missing(proto, cls) -> list[str]:
    return sorted(m for m in _members(proto) if not hasattr(cls, m))


def test_protocols_list_what_the_trainer_uses():
    assert {"sample", "logprobs", "ref_logprobs", "trainable_parameters", "save", "load"} <= _members(I.Policy)
    assert {"name", "response_prefix", "default_max_new_tokens", "prompt", "render", "stop_at", "is_valid",
            "grammar_key", "grammar_sentences"} <= _members(I.Scaffold)
    assert {"predict", "fit", "save", "load"} <= _members(I.WorldModel)
    assert {"submit", "run_batch", "close"} <= _members(I.Executor)
    assert {"tasks", "get"} <= _members(I.TaskSource)


@pytest.mark.parametrize("name", ["script", "function", "grammar"])
def test_every_scaffold_is_a_scaffold(name):
    from wmrl.models.scaffolds import get_scaffold

    sc = get_scaffold(name)
    assert isinstance(sc, I.Scaffold) and not _missing(I.Scaffold, type(sc))
    if name != "grammar":
        assert sc.grammar_key(None) is None
        with pytest.raises(ValueError, match="no grammar"):
            sc.grammar_sentences("classifier")


def test_implementations_have_every_member():
    from wmrl.execution.pool import LocalExecutor
    from wmrl.execution.ray_pool import RayExecutor
    from wmrl.world_model.generative import GenerativeWorldModel
    from wmrl.models.policy import Policy
    from wmrl.world_model.regression import RegressionWorldModel
    from wmrl.tasks.loader import TaskSuite

    assert not _missing(I.Policy, Policy)
    assert not _missing(I.WorldModel, RegressionWorldModel) and not _missing(I.WorldModel, GenerativeWorldModel)
    assert not _missing(I.Executor, LocalExecutor) and not _missing(I.Executor, RayExecutor)
    assert not _missing(I.TaskSource, TaskSuite)
    from wmrl.serve.client import RemoteExecutor, RemoteWorldModel

    assert not _missing(I.Executor, RemoteExecutor) and not _missing(I.WorldModel, RemoteWorldModel)


def test_the_trainers_test_doubles_keep_to_the_protocols():
    import tests.support.fakes as F

    assert not _missing(I.Policy, F.FakePolicy)
    assert not _missing(I.WorldModel, F.FakeWorldModel)
    assert not _missing(I.Executor, F.FakeExecutor)
    assert not _missing(I.Scaffold, F.FakeScaffold)
