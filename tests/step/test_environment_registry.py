"""Environments are a :class:`wmrl.core.registry.Registry` like every other name-to-thing map: the built-ins are lazy
(importing the step engine imports neither the Kaggle tasks' nor Meta-World's module), an unknown name gets the
did-you-mean line, and an installed package offers its own through the ``wmrl.environments`` entry-point group."""
from __future__ import annotations

import sys

import pytest

from wmrl.core.registry import Registry, UnknownName
from wmrl.step.environment import ENVIRONMENTS, environment_names, make_environment


def test_the_environments_are_a_registry_with_their_entry_point_group() -> None:
    assert isinstance(ENVIRONMENTS, Registry) and ENVIRONMENTS.group == "wmrl.environments"
    assert {"kaggle", "metaworld"} <= set(environment_names())


def test_an_unknown_environment_gets_the_registrys_one_line() -> None:
    with pytest.raises(UnknownName, match=r"^unknown environment 'kagle' \(did you mean 'kaggle'\?\); registered: "
                                          r"(.*, )?kaggle, "):
        make_environment("kagle")


def test_an_installed_package_registers_an_environment_by_entry_point(tmp_path, monkeypatch) -> None:
    pkg = tmp_path / "my_envs.py"
    pkg.write_text("class Coin:\n    name = 'coin'\n    def __init__(self, p=0.5):\n        self.p = p\n")
    info = tmp_path / "my_envs-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-envs\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[wmrl.environments]\ncoin = my_envs:Coin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(ENVIRONMENTS, "_entry_points", None)  # read the entry points again, with the package
    try:
        assert "coin" in environment_names() and "my_envs" not in sys.modules  # listed, not imported
        assert make_environment("coin", p=0.25).p == 0.25
    finally:
        ENVIRONMENTS.unregister("coin")
        sys.modules.pop("my_envs", None)
