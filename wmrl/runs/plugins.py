"""Plugin modules a config names (``plugins:``): imported before the config's other keys are checked, so the names
they register (recipes, environments, routers, ..., docs/plugins.md) are accepted like built-in ones."""
from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from wmrl.runs.config import id_list


def import_plugin(spec: str, key: str = "plugins") -> str:
    """Import the plugin module ``spec`` for its side effect (it registers recipes, environments, routers, ... in
    their registries, docs/plugins.md) and return ``spec``. ``spec`` is a dotted module name (``my_package.envs``)
    or the path of a ``.py`` file (absolute, or relative to the current directory; a config file's own relative paths
    are made absolute from its folder first, :func:`plugin_files_from`), imported under its file name's stem; a file imported already is not imported again, so a config read twice registers nothing twice.

    Raises:
        ValueError: the module or file is not found, its import failed, or another module of the file's stem is
            imported already (one line starting ``<key>: ``).
    """
    spec = str(spec).strip()
    if not _is_file_spec(spec):
        try:
            importlib.import_module(spec)
        except Exception as e:  # noqa: BLE001 - any failure of the plugin's own code is reported in one line
            raise ValueError(f"{key}: importing module {spec!r} failed: {type(e).__name__}: {e} (a plugin is a "
                             f"module name on the Python path or a .py file)") from None
        return spec
    path = Path(spec).expanduser().resolve()
    if not path.is_file():
        raise ValueError(f"{key}: plugin file {spec!r} not found (a path is read from the current directory "
                         f"{Path.cwd()})")
    name = path.stem
    old = sys.modules.get(name)
    if old is not None:
        where = getattr(old, "__file__", None)
        if where is not None and Path(where).resolve() == path:
            return spec
        raise ValueError(f"{key}: plugin file {spec!r} would be the module {name!r}, which is imported already from "
                         f"{where or 'elsewhere'}; rename the file")
    loader_spec = importlib.util.spec_from_file_location(name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise ValueError(f"{key}: {spec!r} cannot be imported as a Python module; give a .py file")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module
    try:
        loader_spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - any failure of the plugin's own code is reported in one line
        sys.modules.pop(name, None)
        raise ValueError(f"{key}: importing plugin file {spec!r} failed: {type(e).__name__}: {e}") from None
    return spec


def _is_file_spec(spec: str) -> bool:
    return spec.endswith(".py") or "/" in spec or "\\" in spec


def plugin_files_from(data: dict[str, Any], folder: str | Path, key: str = "plugins") -> dict[str, Any]:
    """Make the relative ``.py`` paths of ``data[key]`` (a config file's raw mapping) absolute from ``folder``, the
    config file's own folder, so that a config names its plugin files as it names them beside itself, whatever the
    current directory (module names and absolute paths are left as they are; a value that is not a list of text is
    left for the field's own check). Returns ``data``, changed in place."""
    if key in data:
        value = id_list(data[key])
        if isinstance(value, list) and all(isinstance(x, str) for x in value):
            data[key] = [str((Path(folder) / Path(x.strip()).expanduser()).resolve())
                         if _is_file_spec(x.strip()) and not Path(x.strip()).expanduser().is_absolute() else x
                         for x in value]
    return data


def import_plugins(data: Any, key: str = "plugins") -> Any:
    """:func:`import_plugin` on every entry of ``data[key]`` (a list, or text as ``tasks.train`` takes it) of a root
    config's raw mapping, in order; for a root model's ``mode="before"`` validator, so the plugins register their
    names before any other key is checked. Returns ``data``; a value that is not a list of text is left for the
    field's own check.

    Raises:
        ValueError: as :func:`import_plugin`.
    """
    if isinstance(data, dict) and key in data:
        value = id_list(data[key])
        if isinstance(value, list) and all(isinstance(x, str) for x in value):
            for spec in value:
                import_plugin(spec, key)
    return data
