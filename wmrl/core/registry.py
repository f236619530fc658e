"""One shape for every name-to-thing map of wmrl: :class:`Registry`.

Recipes, debiasings, fusions, routers, environments, task layouts, world-model kinds, scaffolds and evaluation
protocols are each a :class:`Registry`: ``register(name, obj)`` (a taken name is refused), ``get(name)`` (an
unknown name raises :class:`UnknownName`, whose one-line message lists the registered names and suggests the
closest one), ``names()`` (registration order), and two kinds of lazy entries:

* **built-in lazy entries** (``lazy={"generative": "wmrl.world_model.generative:GenerativeWorldModel"}``): a name
  whose object is imported on the first :meth:`Registry.get` (heavy modules stay unimported until asked for);
* **entry points**: a registry with ``group="wmrl.recipes"`` also offers every entry point of that
  ``importlib.metadata`` group, so an installed package registers its own without wmrl importing it::

      # the plugin's pyproject.toml
      [project.entry-points."wmrl.recipes"]
      my-recipe = "my_package.recipes:MY_RECIPE"

  The entry point's name is the registered name; its value is loaded on the first ``get`` of that name (or by
  :meth:`Registry.items`). A value ``"module"`` without ``:attr`` is imported for its side effect: the module
  registers the name itself (e.g. with a decorator).

The registry imports nothing of wmrl, so every layer (``wmrl.core`` included) may use it.
"""
from __future__ import annotations

import difflib
import importlib
import importlib.metadata
from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = ["DuplicateName", "Registry", "UnknownName"]


class UnknownName(KeyError, ValueError):
    """A name that no entry of the registry has; ``str()`` is the one-line message (not ``KeyError``'s quoted
    repr). Both a ``KeyError`` (a failed lookup) and a ``ValueError`` (a bad name given as a setting), so callers
    catching either keep working."""

    def __init__(self, message: str, name: str, close: str | None) -> None:
        super().__init__(message)
        self.message = message
        self.name = name
        self.close = close

    def __str__(self) -> str:
        return self.message


class DuplicateName(ValueError):
    """``register`` of a name that is taken (the message names the registry and the name)."""


class Registry(Generic[T]):
    """A name -> object map with a did-you-mean lookup, lazy built-ins and entry points.

    Args:
        kind: what an entry is, for messages (``"recipe"``, ``"task layout"``).
        group: the ``importlib.metadata`` entry-point group whose entries this registry offers (e.g.
            ``"wmrl.recipes"``); None: no entry points.
        lazy: built-in names whose objects are imported on first use: name -> ``"module:attribute"`` (the
            attribute is registered) or ``"module"`` (importing it registers the name).
    """

    def __init__(self, kind: str, *, group: str | None = None, lazy: Mapping[str, str] | None = None) -> None:
        self.kind = kind
        self.group = group
        self._entries: dict[str, T] = {}
        self._lazy: dict[str, str] = dict(lazy or {})
        self._entry_points: dict[str, importlib.metadata.EntryPoint] | None = None

    # ---------------------------------------------------------------------------------------------- writing
    def register(self, name: str, obj: T, *, replace: bool = False) -> T:
        """Add ``obj`` under ``name`` and return it.

        Args:
            replace: allow replacing an existing entry (tests, notebooks).

        Raises:
            DuplicateName: ``name`` is registered already (re-registering the very same object is allowed, so a
                module imported twice does not fail).
            ValueError: ``name`` is empty or not a string.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.kind} name must be a non-empty string, got {name!r}")
        old = self._entries.get(name)
        if old is not None and old is not obj and not replace:
            raise DuplicateName(f"a {self.kind} named {name!r} is registered already; choose another name "
                                f"(or pass replace=True)")
        self._entries[name] = obj
        return obj

    def decorator(self, name: str, *, replace: bool = False) -> Callable[[T], T]:
        """``@registry.decorator("name")`` above a class or function registers it (see :meth:`register`)."""

        def wrap(obj: T) -> T:
            return self.register(name, obj, replace=replace)

        return wrap

    def unregister(self, name: str) -> None:
        """Remove ``name`` (tests); a name that is not registered is ignored."""
        self._entries.pop(name, None)

    # ---------------------------------------------------------------------------------------------- reading
    def _points(self) -> dict[str, importlib.metadata.EntryPoint]:
        """The group's entry points by name (read once; the first of two with one name wins)."""
        if self._entry_points is None:
            found: dict[str, importlib.metadata.EntryPoint] = {}
            if self.group is not None:
                for ep in importlib.metadata.entry_points(group=self.group):
                    found.setdefault(ep.name, ep)
            self._entry_points = found
        return self._entry_points

    def names(self) -> list[str]:
        """Every name (nothing is imported): the built-in lazy ones in their declared order, loaded or not (so the
        order does not depend on what was imported first), then the others registered in registration order, then
        entry points not yet loaded."""
        out = list(self._lazy)
        out += [n for n in self._entries if n not in self._lazy]
        out += [n for n in self._points() if n not in self._entries and n not in self._lazy]
        return out

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.names()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def _load(self, name: str) -> None:
        """Import a lazy entry or an entry point of ``name`` (nothing when it is neither)."""
        target: str | None = self._lazy.get(name)
        point = self._points().get(name) if target is None else None
        if target is None and point is None:
            return
        if point is not None:
            target = point.value
        assert target is not None
        module, _, attr = target.partition(":")
        try:
            mod = importlib.import_module(module.strip())
        except ImportError as exc:
            where = f"entry point {name!r} of {self.group}" if point is not None else f"built-in {self.kind}"
            raise ImportError(f"{self.kind} {name!r}: importing {module.strip()} ({where}) failed: {exc}") from exc
        if name in self._entries:
            return
        if not attr:
            raise LookupError(f"{self.kind} {name!r}: importing {module.strip()} did not register it; the module "
                              f"must call register({name!r}, ...) or the entry point must name an object "
                              f"(module:attribute)")
        obj = mod
        for part in attr.strip().split("."):
            obj = getattr(obj, part)
        self.register(name, obj)  # type: ignore[arg-type]  # the entry point names an object of this kind

    def get(self, name: str) -> T:
        """The entry called ``name``, importing it first when it is a lazy built-in or an entry point.

        Raises:
            UnknownName: no such entry; the message lists the names and the closest one.
            ImportError: the module of a lazy entry or entry point failed to import (the message says which).
        """
        if name not in self._entries:
            self._load(name)
        try:
            return self._entries[name]
        except KeyError:
            raise self.unknown(name) from None

    def unknown(self, name: object) -> UnknownName:
        """The :class:`UnknownName` error for ``name`` (for callers that check a name before using it)."""
        names = self.names()
        close = difflib.get_close_matches(str(name), names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return UnknownName(f"unknown {self.kind} {name!r}{hint}; registered: {', '.join(names) or '(none)'}",
                           str(name), close[0] if close else None)

    def check(self, name: str, key: str | None = None) -> str:
        """``name`` if it is a name of this registry (nothing is imported), else :meth:`unknown`'s error; a config
        validates a setting with it (``functools.partial(ROUTERS.check, key="wmrl.routing.router")``).

        Args:
            key: the setting that gave the name; the message then starts with ``"<key>: "``.

        Raises:
            UnknownName: as :meth:`get`.
        """
        if name in self.names():
            return name
        err = self.unknown(name)
        if key is not None:
            err = UnknownName(f"{key}: {err.message}", err.name, err.close)
        raise err

    def items(self) -> list[tuple[str, T]]:
        """Every (name, entry) pair in :meth:`names` order, importing lazy entries and entry points.

        Raises:
            ImportError: as :meth:`get`.
        """
        return [(n, self.get(n)) for n in self.names()]

    def loaded(self) -> dict[str, T]:
        """The entries registered so far (nothing is imported), in registration order; a copy."""
        return dict(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, names={self.names()!r})"
