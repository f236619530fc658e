"""Run test modules against mutants that survived a mutmut run, without mutmut's scheduler: which tests kill which.

    cd mutants && grep survived-names.txt | python ../studies/mutation/recheck.py tests.core.test_fusion_mutants

reads mutant names (one a line) on stdin and, in mutmut's ``mutants/`` copy of the repository (the current
folder), calls every test function of the named modules with each mutant switched on (mutmut's own switch, the
``MUTANT_UNDER_TEST`` environment variable its trampolines read), printing ``KILLED NAME by TESTS`` or
``alive NAME``. The first line names the tests that fail with no mutant (there should be none). A developer tool
for the survivors of ``studies/mutation/summary.md``; it needs mutmut installed (``pip install mutmut==3.8.1``).
"""
from __future__ import annotations

import functools
import importlib
import inspect
import os
import sys
from collections.abc import Callable, Iterator
from types import ModuleType


def cases(mods: list[ModuleType]) -> Iterator[tuple[str, Callable[[], object]]]:
    """(name, call) of every test function of ``mods``, one per parameter set of a ``parametrize`` mark."""
    for mod in mods:
        for name, fn in inspect.getmembers(mod, inspect.isfunction):
            if not name.startswith("test_") or fn.__module__ != mod.__name__:
                continue
            params = [m for m in getattr(fn, "pytestmark", []) if m.name == "parametrize"]
            if not params:
                yield name, fn
                continue
            argnames, values = params[0].args[0], params[0].args[1]
            names = [a.strip() for a in argnames.split(",")] if isinstance(argnames, str) else list(argnames)
            for v in values:
                v = v if isinstance(v, tuple) else (v,)
                yield f"{name}[{v[0]}]", functools.partial(fn, **dict(zip(names, v)))


def failing(mods: list[ModuleType], mutant: str) -> list[str]:
    """The tests of ``mods`` that fail with ``mutant`` switched on ("" for none)."""
    os.environ["MUTANT_UNDER_TEST"] = mutant
    out = []
    for name, call in cases(mods):
        try:
            call()
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:  # noqa: BLE001 - any failure of a test is a kill (pytest's Failed is a BaseException)
            out.append(name)
    return out


def main() -> None:
    """See the module docstring."""
    sys.path.insert(0, os.getcwd())
    mods = [importlib.import_module(m) for m in sys.argv[1:]]
    print("failing with no mutant:", failing(mods, ""))
    for line in sys.stdin:
        if m := line.strip():
            f = failing(mods, m)
            print(("KILLED " if f else "alive  ") + m + ("  by " + ", ".join(f) if f else ""))


if __name__ == "__main__":
    main()
