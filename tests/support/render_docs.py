"""The docs renderer (``studies/render_docs.py``, a script outside the package) loaded as a module for the tests."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_render_docs() -> ModuleType:
    """``studies/render_docs.py`` imported as the module ``render_docs``."""
    spec = importlib.util.spec_from_file_location("render_docs", ROOT / "studies" / "render_docs.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["render_docs"] = mod
    spec.loader.exec_module(mod)
    return mod
