"""Every name-to-thing map of wmrl is one :class:`wmrl.core.registry.Registry`, and the config checks its names
against the registry when it is validated, so a name registered later (or by an entry point) is accepted."""
from __future__ import annotations

import pytest

from wmrl.core.axes import DEBIASINGS, FUSIONS
from wmrl.core.recipe import RECIPES
from wmrl.core.registry import Registry
from wmrl.core.routing import ROUTERS, FractionRouter
from wmrl.models.scaffolds import SCAFFOLDS, ScriptScaffold
from wmrl.tasks.layouts import LAYOUTS
from wmrl.training.config import ConfigError, load_config
from wmrl.training.protocol import PROTOCOLS
from wmrl.world_model.factory import WORLD_MODELS


@pytest.mark.parametrize("registry, group, first", [
    (RECIPES, "wmrl.recipes", "grpo"), (DEBIASINGS, "wmrl.debiasings", "none"), (FUSIONS, "wmrl.fusions", "equal"),
    (ROUTERS, "wmrl.routers", "fraction"), (LAYOUTS, "wmrl.layouts", "wmrl"),
    (WORLD_MODELS, "wmrl.world_models", "regression"), (SCAFFOLDS, "wmrl.scaffolds", "script"),
    (PROTOCOLS, "wmrl.protocols", "default")])
def test_every_map_is_a_registry_with_its_entry_point_group(registry, group, first):
    assert isinstance(registry, Registry) and registry.group == group and registry.names()[0] == first


def test_the_config_accepts_a_router_kind_and_scaffold_registered_after_import():
    with pytest.raises(ConfigError,
                       match=r"wmrl.routing.router: unknown router 'test-router'; registered: fraction, strat"):
        load_config(None, ["wmrl.routing.router=test-router"])
    with pytest.raises(ConfigError, match=r"scaffold.name: unknown scaffold 'scrpt' \(did you mean 'script'\?\)"):
        load_config(None, ["scaffold.name=scrpt"])
    with pytest.raises(ConfigError, match=r"world_model.kind: unknown world model kind 'regresion' \(did you mean"):
        load_config(None, ["world_model.kind=regresion"])
    ROUTERS.register("test-router", FractionRouter)
    SCAFFOLDS.register("test-scaffold", ScriptScaffold)
    WORLD_MODELS.register("test-kind", object)  # type: ignore[arg-type]  # the config only checks the name
    try:
        cfg = load_config(None, ["wmrl.routing.router=test-router", "scaffold.name=test-scaffold",
                                 "world_model.kind=test-kind"])
        assert (cfg.wmrl.routing.router, cfg.scaffold.name, cfg.world_model.kind) == ("test-router", "test-scaffold",
                                                                              "test-kind")
    finally:
        ROUTERS.unregister("test-router")
        SCAFFOLDS.unregister("test-scaffold")
        WORLD_MODELS.unregister("test-kind")


def test_a_router_that_refuses_the_settings_is_a_config_error():
    with pytest.raises(ConfigError, match="wmrl.routing.router='hash': the hash router .* cannot guarantee min_every"):
        load_config(None, ["wmrl.routing.router=hash", "wmrl.routing.min_anchor_every=10"])
    assert load_config(None, ["wmrl.routing.router=hash",
                              "wmrl.routing.min_anchor_every=0"]).wmrl.routing.router == "hash"
