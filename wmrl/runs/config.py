"""The config kit every trainer shares: typed sections on pydantic, strict YAML, ``--set`` overrides, and errors
that name the key, the bad value and what is allowed.

A trainer's config is a tree of :class:`ConfigSection` models (unknown keys refused, assignments validated);
each field's ``Field(description=...)`` is its help text (``wmrl config show``) and its range the field's
``ge``/``gt``/``le``. What this module adds to pydantic: YAML that refuses a key given twice
(:func:`load_yaml`), ``--set a.b=value`` overrides checked against the models (:func:`apply_overrides`), every
number required finite, :class:`ConfigError` messages with a did-you-mean for typos and a hint for keys that
were removed (a root model's ``removed_keys``), and the ``describe_fields`` table. The text track's
:mod:`wmrl.training.config` and the embodied track's :mod:`wmrl.embodied.config` are built on it.

About 560 lines: the kit is one module because its parts read one another's view of a section tree (the error
messages walk the models the overrides, the migrations and the field table walk too); split, each part would import
the others' private helpers.

Usage (``MyConfig`` a :class:`ConfigSection` with nested sections)::

    data = read_config_file("my.yaml")                  # {} when the path is None
    apply_overrides(MyConfig, data, ["optim.steps=3"])
    cfg = model_from_dict(MyConfig, data)               # ConfigError naming the key when invalid
"""
from __future__ import annotations

import copy
import difflib
import math
import types
import typing
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Protocol, TypeGuard, TypeVar, get_args, get_origin

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from wmrl.runs.rundir import write_text_atomic


class ConfigError(ValueError):
    """A config key or value is not valid; the message names it and says what is allowed."""


#: The largest seed a config takes: what numpy's global RNG accepts (``np.random.seed``; torch takes more).
MAX_SEED = 2**32 - 1
#: The largest YAML text :func:`load_yaml` parses, bytes (a config or a run's config.yaml is a few KiB).
MAX_YAML_BYTES = 4 * 1024**2
#: The most values a YAML document may hold once its aliases are expanded (each alias counts its whole value
#: again): an "alias bomb" of 9 levels of 9 aliases holds 9**9 and would take gigabytes to walk or print.
MAX_YAML_NODES = 1_000_000
#: The deepest nesting :func:`load_yaml` parses (PyYAML's parser recurses once per level).
MAX_YAML_DEPTH = 200


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses a key given twice in one mapping (plain YAML keeps the last)."""


def _no_duplicate_keys(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is given twice in one mapping (line {key_node.start_mark.line + 1}); "
                "keep one", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicate_keys)


class YAMLTooLarge(yaml.YAMLError):
    """A YAML text beyond the bounds of :func:`load_yaml` (size, nesting, or values once aliases are expanded)."""


def _expanded_size(root: yaml.Node) -> int:
    """How many values the node graph ``root`` holds once every alias is expanded (a shared node counts once
    per place it is used), counted without expanding anything; stops counting past :data:`MAX_YAML_NODES`.

    Raises:
        YAMLTooLarge: nesting deeper than :data:`MAX_YAML_DEPTH`.
    """
    size: dict[int, int] = {}
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 0, False)]
    while stack:
        node, depth, done = stack.pop()
        if id(node) in size and not done:
            continue
        if depth > MAX_YAML_DEPTH:
            raise YAMLTooLarge(f"nested deeper than {MAX_YAML_DEPTH} levels (line {node.start_mark.line + 1})")
        kids: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            kids = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            kids = [n for pair in node.value for n in pair]
        if done:
            size[id(node)] = min(MAX_YAML_NODES + 1, 1 + sum(size[id(k)] for k in kids))
            continue
        size[id(node)] = 0  # in progress: a node that contains itself (a recursive alias) adds nothing more
        stack.append((node, depth, True))
        stack.extend((k, depth + 1, False) for k in kids if id(k) not in size)
    return size[id(root)]


def load_yaml(text: str) -> Any:
    """Parse YAML text like ``yaml.safe_load``, but refuse a key given twice in one mapping, and refuse text
    beyond bounds before anything is built from it: over :data:`MAX_YAML_BYTES`, nested deeper than
    :data:`MAX_YAML_DEPTH`, or holding more than :data:`MAX_YAML_NODES` values once its aliases are expanded.

    Raises:
        yaml.YAMLError: bad YAML, or a duplicate key (the message names it and its line);
            :class:`YAMLTooLarge` (a subclass) for text beyond the bounds (the message says which).
    """
    if len(text) > MAX_YAML_BYTES:
        raise YAMLTooLarge(f"{len(text)} characters, more than a config may hold ({MAX_YAML_BYTES})")
    loader = _StrictLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise YAMLTooLarge(f"nested deeper than {MAX_YAML_DEPTH} levels") from None
        if node is None:
            return None
        if _expanded_size(node) > MAX_YAML_NODES:
            raise YAMLTooLarge(f"more than {MAX_YAML_NODES:,} values once its aliases (*name) are expanded; an alias "
                               f"repeats its anchor's whole value: write the values out, or use fewer aliases")
        return loader.construct_document(node)
    finally:
        loader.dispose()


# --------------------------------------------------------------------------------------------------
# field types: pydantic's lax mode, plus the few leniencies and refusals the YAML/--set inputs need

def _not_bool(v: Any) -> Any:
    """Refuse a boolean where a number is expected (pydantic would read ``true`` as 1)."""
    if isinstance(v, bool):
        raise PydanticCustomError("bool_for_number", "a boolean is not a number")
    return v


def _integer(v: Any) -> Any:
    """:func:`_not_bool`, and a float with an integral value (``3.0``, ``1e20``) is that integer."""
    return int(v) if isinstance(_not_bool(v), float) and v.is_integer() else v


def _nullable(v: Any) -> Any:
    """The words ``null``, ``none`` and ``~`` (any case) stand for null in an optional field."""
    return None if isinstance(v, str) and v.strip().lower() in ("null", "none", "~") else v


def id_list(v: Any) -> Any:
    """A list of ids may also be given as text: ``'[a, b]'`` (YAML) or ``'a, b'`` (comma-separated)."""
    v = _nullable(v)
    if isinstance(v, str) and not v.strip().startswith("["):
        return [x.strip() for x in v.split(",") if x.strip()]
    try:
        return load_yaml(v) if isinstance(v, str) else v
    except yaml.YAMLError:
        return v  # not a list: pydantic says so, naming the key


Int = Annotated[int, BeforeValidator(_integer)]
Float = Annotated[float, BeforeValidator(_not_bool)]
OptStr = Annotated[str | None, BeforeValidator(_nullable)]
OptFloat = Annotated[Float | None, BeforeValidator(_nullable)]
OptIds = Annotated[list[str] | None, BeforeValidator(id_list)]


#: A list of plugin modules (:func:`wmrl.runs.plugins.import_plugins` imports them).
Plugins = Annotated[list[str], BeforeValidator(id_list)]


class ConfigSection(BaseModel):
    """Base of every config section: unknown keys refused, assignments validated, numbers given for text
    kept as text. Built or assigned in Python, a bad value raises pydantic's ``ValidationError``; loaded
    (:func:`model_from_dict`) a :class:`ConfigError`.

    A section given with no keys (``model:`` alone in YAML is null) takes its defaults.

    The migrations of old configs live on a root model, and nowhere else: ``removed_keys`` (``{"section.key":
    "what replaces it"}``): an unknown key of that name is answered with the replacement instead of a did-you-mean;
    ``renamed_keys`` (``{"old.dotted.key": "new.dotted.key"}``): a key given under its old name, in a file or in
    ``--set``, is read as the new one (:func:`migrate_keys`), so a config saved before the rename loads to the same
    values."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, coerce_numbers_to_str=True)
    removed_keys: ClassVar[dict[str, str]] = {}
    renamed_keys: ClassVar[dict[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _empty_sections(cls, data: Any) -> Any:
        """A section given as null takes its defaults."""
        if isinstance(data, dict):
            return {k: {} if v is None and _is_section(getattr(cls.model_fields.get(k), "annotation", None)) else v
                    for k, v in data.items()}
        return data


#: The old name of :class:`ConfigSection`.
_Section = ConfigSection

M = TypeVar("M", bound=BaseModel)


def _removed_hint(root: type[BaseModel], where: str) -> str:
    removed = getattr(root, "removed_keys", {})
    return f" ({where} was removed: {removed[where]})" if where in removed else ""


def _unknown_key_hint(root: type[BaseModel], section: str, name: str, names: list[str]) -> str:
    """What to say of the unknown key ``name`` of ``section`` (dotted, '' for the root) whose keys are ``names``: that
    it was removed and what replaces it, else the closest key, among ``names`` and the old names of keys ``root``
    renamed (then its new dotted name: a typo of an old name); '' when nothing is close."""
    where = f"{section}.{name}" if section else name
    removed = _removed_hint(root, where)
    if removed:
        return removed
    prefix = f"{section}." if section else ""
    old = {k[len(prefix):]: new for k, new in getattr(root, "renamed_keys", {}).items()
           if k.startswith(prefix) and "." not in k[len(prefix):]}
    close = difflib.get_close_matches(name, [*names, *old], n=1)
    return f" Did you mean {old.get(close[0], close[0])!r}?" if close else ""


# --------------------------------------------------------------------------------------------------
# pydantic's errors as messages that name the key path, the value and what is allowed

def _strip(tp: Any) -> tuple[Any, bool]:
    """``(base type, nullable)`` of an annotation, without ``Annotated`` and ``Optional``."""
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    if get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        return _strip(args[0])[0], True
    return tp, False


def _is_section(tp: Any) -> TypeGuard[type[BaseModel]]:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _type_name(tp: Any) -> str:
    """An annotation as the type column of ``wmrl config show``: ``int``, ``str | null``, ``'a' | 'b'``."""
    base, nullable = _strip(tp)
    if get_origin(base) is Literal:
        name = " | ".join(repr(a) for a in get_args(base))
    elif get_origin(base) is list:
        name = f"list[{_type_name(get_args(base)[0])}]"
    else:
        name = getattr(base, "__name__", str(base))
    return name + (" | null" if nullable else "")


def _range_text(f: FieldInfo) -> str:
    """The allowed range of a field as text (``'0.0 .. 1.0'``, ``'> 0.0'``, ``'>= 1'``), '' when none."""
    b = {k: getattr(m, k) for m in f.metadata for k in ("ge", "gt", "le", "lt") if hasattr(m, k)}  # annotated-types
    lo, hi, gt = b.get("ge"), b.get("le"), b.get("gt")
    low = f"> {gt}" if gt is not None else (f">= {lo}" if lo is not None else "")
    if b.get("lt") is not None:
        return f"{low} and < {b['lt']}" if low else f"< {b['lt']}"
    if hi is None:
        return low
    if gt is None and lo is not None:
        return f"{lo} .. {hi}"
    return f"{low} and <= {hi}" if low else f"<= {hi}"


def _allowed(f: FieldInfo) -> str:
    """``'a finite number in 0.0 .. 1.0'``, ``'an integer >= 1'``: what a numeric field accepts."""
    rng = _range_text(f)
    kind = "an integer" if _strip(f.annotation)[0] is int else "a finite number"
    return kind + ((f" in {rng}" if ".." in rng else f" {rng}") if rng else "")


_EXPECTED = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
_RANGE_ERRORS = {"greater_than": ("is not above the minimum", "gt"),
                 "greater_than_equal": ("is below the minimum", "ge"),
                 "less_than_equal": ("is above the maximum", "le"),
                 "less_than": ("is not below the maximum", "lt")}


def _key(loc: tuple[Any, ...]) -> str:
    """``('tasks', 'train', 0)`` -> ``'tasks.train[0]'``."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


def _error_text(err: Any, root: type[BaseModel]) -> str:
    """One pydantic error (an item of ``ValidationError.errors()``) as a message naming the key path;
    ``root`` is the model the error's location starts at."""
    kind, loc, value = err["type"], tuple(err["loc"]), err.get("input")
    if kind == "value_error":  # a cross-field rule: its message names its keys itself
        return str(err["ctx"]["error"])
    owner: type[BaseModel] | None = root  # walk the models along the error's location
    field, item = None, False
    for part in loc:
        if isinstance(part, int):
            item = True
        elif owner is not None and part in owner.model_fields:
            field, item = owner.model_fields[part], False
            owner = field.annotation if _is_section(field.annotation) else None
    key = _key(loc)
    if kind in ("extra_forbidden", "invalid_key"):
        section, names = _key(loc[:-1]), list((owner or root).model_fields)
        name = value if kind == "invalid_key" else loc[-1]
        hint = _unknown_key_hint(root, section, str(name), names)
        return (f"unknown config key {(f'{section}.{name}' if section else name)!r}.{hint} Allowed keys"
                f"{' in ' + section if section else ''}: {', '.join(names)}")
    base, nullable = _strip(field.annotation if field else root)
    if item:
        base, nullable = _strip(get_args(base)[0])
    if get_origin(base) is Literal:
        allowed = get_args(base)
        close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"{key}: {value!r} is not allowed; choose one of {', '.join(map(repr, allowed))}{hint}"
    if kind in _RANGE_ERRORS and field is not None:
        v = float(value) if base is float else value  # as pydantic read it ('nan' -> nan)
        if isinstance(v, float) and not math.isfinite(v):
            return f"{key}: {v!r} is not allowed; expected {_allowed(field)}"
        words, bound = _RANGE_ERRORS[kind]
        return f"{key}: {v!r} {words} {err['ctx'][bound]}; expected {_allowed(field)}"
    expected = ("a mapping of keys" if _is_section(base) else f"a list ({_type_name(base)})"
                if get_origin(base) is list else _EXPECTED.get(base, _type_name(base)))
    return (f"{key or 'config'}: expected {expected}{' or null' if nullable else ''}, got {value!r}"
            f"{_removed_hint(root, key)}")


def _errors_text(e: ValidationError, root: type[BaseModel]) -> str:
    """Every error of ``e`` as :func:`_error_text` (locations from ``root``), one per line."""
    return "\n".join(dict.fromkeys(_error_text(err, root) for err in e.errors(include_url=False)))


def _require_finite(obj: BaseModel, prefix: str = "") -> None:
    """Raise :class:`ConfigError` for a non-finite number anywhere in ``obj``. Pydantic's ``gt``/``ge``
    admit ``inf``; a config is loaded or trained only with finite numbers (:func:`validate`)."""
    for name, f in type(obj).model_fields.items():
        v, key = getattr(obj, name), f"{prefix}.{name}" if prefix else name
        if isinstance(v, BaseModel):
            _require_finite(v, key)
        elif isinstance(v, float) and not math.isfinite(v):
            raise ConfigError(f"{key}: {v!r} is not allowed; expected {_allowed(f)}")




def require_finite(obj: BaseModel, prefix: str = "") -> None:
    """Raise :class:`ConfigError` for a non-finite number anywhere in ``obj``. Pydantic's ``gt``/``ge``
    admit ``inf``; a config is loaded or trained only with finite numbers."""
    _require_finite(obj, prefix)


def _node(data: Any, parts: list[str]) -> Any:
    """``data[parts[0]][parts[1]]...`` of nested dicts, or None where a part is missing or not a mapping."""
    for p in parts:
        data = data.get(p) if isinstance(data, dict) else None
    return data


def dotted_value(cfg: BaseModel, key: str) -> Any:
    """The value (or section) at the dotted ``key`` of the config ``cfg`` (``"wmrl.alarm.response"``).

    Raises:
        AttributeError: no such key.
    """
    node: Any = cfg
    for part in key.split("."):
        node = getattr(node, part)
    return node


def renamed(root: type[BaseModel], key: str) -> str:
    """The current name of the dotted ``key`` (its new name when ``root`` renamed it, else ``key``)."""
    names: dict[str, str] = getattr(root, "renamed_keys", {})
    return names.get(key, key)


def migrate_keys(root: type[BaseModel], data: dict[str, Any]) -> dict[str, Any]:
    """Move every value given under an old name of ``root``'s ``renamed_keys`` to its new place in the nested dict
    ``data`` (in place; also returned), so a config saved before the rename reads as it did.

    Raises:
        ConfigError: a key given under both its old and its new name.
    """
    for old, new in getattr(root, "renamed_keys", {}).items():
        *parents, leaf = old.split(".")
        src = _node(data, parents)
        if not isinstance(src, dict) or leaf not in src:
            continue
        *new_parents, new_leaf = new.split(".")
        dst = data
        for p in new_parents:
            if dst.get(p) is None:
                dst[p] = {}
            if not isinstance(dst[p], dict):
                break  # not a mapping: the validation names the key
            dst = dst[p]
        else:
            if new_leaf in dst:
                raise ConfigError(f"{old} is the old name of {new} and both are given; keep {new}")
            dst[new_leaf] = src.pop(leaf)
    return data


def model_from_dict(root: type[M], data: dict[str, Any] | None) -> M:
    """Build and validate a ``root`` config from nested dicts (parsed YAML; not changed), every number finite; keys
    given under an old name are read as their new one (:func:`migrate_keys`).

    Raises:
        ConfigError: unknown key, wrong type, out-of-range or disallowed value (the message names the key); a key
            given under its old and its new name.
    """
    try:
        cfg = root.model_validate(migrate_keys(root, copy.deepcopy(dict(data or {}))))
    except ValidationError as e:
        raise ConfigError(_errors_text(e, root)) from None
    _require_finite(cfg)
    return cfg


def read_config_file(path: str | Path | None) -> dict[str, Any]:
    """The top-level mapping of a YAML config file (``{}`` when ``path`` is None).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ConfigError: ``path`` is a folder, not text, empty (or only comments), invalid YAML (message: file, line,
            column, problem), a key given twice, beyond the bounds of :func:`load_yaml`, or not a mapping at the
            top level.
    """
    if path is None:
        return {}
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"config {str(p)!r} is a folder, not a YAML file")
    if not p.is_file():
        raise FileNotFoundError(f"config file {str(p)!r} not found")
    if p.stat().st_size > MAX_YAML_BYTES:
        raise ConfigError(f"config {p} is {p.stat().st_size} bytes, more than a config may hold ({MAX_YAML_BYTES}); "
                          "is it the right file?")
    try:
        data = load_yaml(p.read_text())
    except UnicodeDecodeError as e:
        raise ConfigError(f"cannot parse {p} as YAML: not a text file ({e.reason} at byte {e.start})") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"cannot parse {p} as YAML: {_yaml_error_text(e)}") from e
    if data is None:
        raise ConfigError(f"config {p} is empty: put in it the keys that differ from the defaults, e.g. "
                          "`method: grpo` (every key with its default and help: `wmrl config show`)")
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: the top level must be a mapping of keys, got {type(data).__name__}")
    return data


class Dumpable(Protocol):
    """A config that :func:`dump_config` writes: a :class:`ConfigSection` (any pydantic model)."""

    def model_dump(self) -> dict[str, Any]:
        """The config as nested dicts, fields in declaration order."""
        ...


def dump_config(cfg: Dumpable) -> str:
    """The resolved config as YAML text (every field, sections in declaration order)."""
    return yaml.safe_dump(cfg.model_dump(), sort_keys=False, default_flow_style=False)


def save_config(cfg: Dumpable, path: str | Path) -> None:
    """Write the resolved config as YAML atomically (:func:`wmrl.runs.rundir.write_text_atomic`: temp file, fsync,
    rename), as every trainer saves its run's ``config.yaml``."""
    write_text_atomic(Path(path), dump_config(cfg))


def _set_path(root: type[BaseModel], data: dict[str, Any], dotted: str, raw: str) -> None:
    """Set ``data[a][b] = value`` for ``dotted='a.b'``, checking every part against the models from ``root``."""
    parts = dotted.split(".")
    cls: Any = root
    node = data
    for i, part in enumerate(parts):
        names = list(cls.model_fields)
        where = ".".join(parts[: i + 1])
        if part not in names:
            hint = _unknown_key_hint(root, ".".join(parts[:i]), part, names)
            raise ConfigError(f"--set: unknown config key {where!r}.{hint} Allowed: {', '.join(names)}")
        tp = cls.model_fields[part].annotation
        if i < len(parts) - 1:
            if not _is_section(tp):
                raise ConfigError(f"--set: {where!r} is a value, not a section")
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
            cls = tp
            continue
        if _is_section(tp):
            raise ConfigError(f"--set: {dotted!r} is a section; set one of its keys, e.g. "
                              f"{dotted}.{next(iter(tp.model_fields))}=...{_removed_hint(root, dotted)}")
        # YAML parsing gives numbers, booleans, null and lists; the models' types do the rest.
        # String fields keep the raw text (so "model.name=1e3" stays "1e3"), except null.
        try:
            value = load_yaml(raw) if raw.strip() != "" else ""
        except YAMLTooLarge as e:
            raise ConfigError(f"--set {dotted}: {e}") from None
        except yaml.YAMLError:
            value = raw
        if _strip(tp)[0] is str and value is not None:
            value = raw
        node[part] = value


def apply_overrides(root: type[BaseModel], data: dict[str, Any], overrides: list[str] | None) -> dict[str, Any]:
    """Apply ``key.sub=value`` strings to nested dict ``data`` of a ``root`` config (in place; also returned). The keys
    of ``data`` and of the overrides given under an old name are read as their new one (:func:`migrate_keys`), so an
    override of the new name replaces a value ``data`` holds under the old.

    Raises:
        ConfigError: an override without ``=`` or naming an unknown key; a key of ``data`` given under its old and
            its new name.
    """
    migrate_keys(root, data)
    for ov in overrides or []:
        if "=" not in ov:
            raise ConfigError(f"--set expects key=value (e.g. optim.steps=3), got {ov!r}")
        k, v = ov.split("=", 1)
        k = k.strip()
        if not k:
            raise ConfigError(f"--set expects key=value, got {ov!r}")
        _set_path(root, data, renamed(root, k), v)
    return data



def _yaml_error_text(e: yaml.YAMLError) -> str:
    """A parser error on one line: ``line L, column C: problem (while <context> at line L', column C')``."""
    problem = getattr(e, "problem", None)
    mark = getattr(e, "problem_mark", None)
    if isinstance(e, YAMLTooLarge):
        return str(e)
    if problem is None or mark is None:
        return " ".join(str(e).split())
    text = f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    context, cmark = getattr(e, "context", None), getattr(e, "context_mark", None)
    if context:
        text += f" ({context}" + (f" at line {cmark.line + 1}, column {cmark.column + 1})" if cmark else ")")
    return text



def describe_fields(cls: type[BaseModel], prefix: str = "",
                    obj: Any = None) -> list[tuple[str, str, str, str]]:
    """Rows ``(key, type, value, help)`` for every field, nested sections flattened with dots.

    ``obj`` (an instance of ``cls``) gives the values; defaults when None.
    """
    obj = obj if obj is not None else cls()
    rows = []
    for name, f in cls.model_fields.items():
        key = f"{prefix}.{name}" if prefix else name
        if _is_section(f.annotation):
            rows.extend(describe_fields(f.annotation, key, getattr(obj, name)))
            continue
        rng = _range_text(f)
        help_text = (f.description or "") + (f" [range: {rng}]" if rng else "")
        rows.append((key, _type_name(f.annotation), yaml.safe_dump(getattr(obj, name), default_flow_style=True)
                     .strip().removesuffix("...").strip(), help_text))
    return rows
