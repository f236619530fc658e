"""The one registry shape (:class:`wmrl.core.registry.Registry`): register, get with a did-you-mean, names, lazy
built-ins and entry points."""
from __future__ import annotations

import importlib.metadata
import sys

import pytest

from wmrl.core import registry as registry_module
from wmrl.core.registry import DuplicateName, Registry, UnknownName


def test_register_get_names_in_registration_order():
    reg: Registry[int] = Registry("widget")
    assert reg.register("beta", 2) == 2
    reg.register("alpha", 1)
    assert reg.names() == ["beta", "alpha"] and list(reg) == ["beta", "alpha"] and len(reg) == 2
    assert reg.get("alpha") == 1 and "alpha" in reg and "gamma" not in reg
    assert reg.check("beta") == "beta"


def test_a_taken_name_is_refused_unless_replaced_or_the_same_object():
    reg: Registry[object] = Registry("widget")
    obj = object()
    reg.register("a", obj)
    reg.register("a", obj)  # the same object again: a module imported twice
    with pytest.raises(DuplicateName, match="a widget named 'a' is registered already; choose another name"):
        reg.register("a", object())
    other = object()
    reg.register("a", other, replace=True)
    assert reg.get("a") is other
    with pytest.raises(ValueError, match="non-empty string"):
        reg.register("", 1)


def test_an_unknown_name_is_one_line_with_the_closest_name():
    reg: Registry[int] = Registry("widget")
    reg.decorator("stratified")(1)
    reg.register("fraction", 2)
    with pytest.raises(UnknownName) as info:
        reg.get("stratifed")
    assert str(info.value) == ("unknown widget 'stratifed' (did you mean 'stratified'?); "
                               "registered: stratified, fraction")
    assert info.value.close == "stratified" and isinstance(info.value, KeyError) and isinstance(info.value, ValueError)
    assert str(reg.unknown("zzz")) == "unknown widget 'zzz'; registered: stratified, fraction"
    with pytest.raises(UnknownName):
        reg.check("zzz")


def test_a_lazy_builtin_is_imported_on_first_get_only(tmp_path, monkeypatch):
    (tmp_path / "wmrl_test_lazy_mod.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg: Registry[int] = Registry("widget", lazy={"answer": "wmrl_test_lazy_mod:VALUE"})
    assert reg.names() == ["answer"] and "wmrl_test_lazy_mod" not in sys.modules
    assert reg.get("answer") == 42 and "answer" in reg.loaded()
    sys.modules.pop("wmrl_test_lazy_mod", None)


def test_the_names_keep_the_declared_order_whichever_lazy_builtin_loads_first(tmp_path, monkeypatch):
    (tmp_path / "wmrl_test_lazy_two.py").write_text("FIRST = 1\nSECOND = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg: Registry[int] = Registry("widget", lazy={"first": "wmrl_test_lazy_two:FIRST",
                                                  "second": "wmrl_test_lazy_two:SECOND"})
    reg.register("own", 3)
    assert reg.names() == ["first", "second", "own"]
    assert reg.get("second") == 2
    assert reg.names() == ["first", "second", "own"]  # loading one does not move it
    assert str(reg.unknown("third")).endswith("registered: first, second, own")
    sys.modules.pop("wmrl_test_lazy_two", None)


def test_entry_points_are_offered_by_name_and_loaded_on_get(tmp_path, monkeypatch):
    (tmp_path / "wmrl_test_plugin.py").write_text(
        "from wmrl.core.routing import ROUTERS\n"
        "OBJ = 'plugin object'\n"
        "class Mine:\n    pass\n"
        "ROUTERS_SEEN = ROUTERS\n")
    (tmp_path / "wmrl_test_selfreg.py").write_text(
        "import wmrl_test_registry_holder as h\nh.REG.register('self-registered', 'by import')\n")
    (tmp_path / "wmrl_test_registry_holder.py").write_text("REG = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    points = [importlib.metadata.EntryPoint(name="plugged", value="wmrl_test_plugin:OBJ", group="wmrl.widgets"),
              importlib.metadata.EntryPoint(name="self-registered", value="wmrl_test_selfreg", group="wmrl.widgets"),
              importlib.metadata.EntryPoint(name="silent", value="wmrl_test_registry_holder", group="wmrl.widgets"),
              importlib.metadata.EntryPoint(name="other", value="x:y", group="wmrl.other")]

    def fake_entry_points(*, group: str) -> list[importlib.metadata.EntryPoint]:
        return [p for p in points if p.group == group]

    monkeypatch.setattr(registry_module.importlib.metadata, "entry_points", fake_entry_points)
    import wmrl_test_registry_holder as holder

    reg: Registry[str] = Registry("widget", group="wmrl.widgets")
    holder.REG = reg
    reg.register("builtin", "b")
    assert reg.names() == ["builtin", "plugged", "self-registered", "silent"]
    assert "wmrl_test_plugin" not in sys.modules
    assert reg.get("plugged") == "plugin object"
    assert reg.get("self-registered") == "by import"
    with pytest.raises(LookupError, match="importing wmrl_test_registry_holder did not register it"):
        reg.get("silent")
    for mod in ("wmrl_test_plugin", "wmrl_test_selfreg", "wmrl_test_registry_holder"):
        sys.modules.pop(mod, None)


def test_a_broken_plugin_names_itself(monkeypatch):
    points = [importlib.metadata.EntryPoint(name="broken", value="wmrl_no_such_module_xyz:OBJ", group="wmrl.w")]
    monkeypatch.setattr(registry_module.importlib.metadata, "entry_points",
                        lambda *, group: [p for p in points if p.group == group])
    reg: Registry[str] = Registry("widget", group="wmrl.w")
    with pytest.raises(ImportError, match="widget 'broken': importing wmrl_no_such_module_xyz .entry point 'broken' "
                                          "of wmrl.w. failed"):
        reg.get("broken")
