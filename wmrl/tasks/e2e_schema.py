"""The columns a competition's grading code reads, by side, and the synthetic frames a column schema builds:
the second stage of the end-to-end coverage run's format search (:func:`wmrl.tasks.e2e_coverage.run_competition`),
for competitions whose code scores none of the one-table formats of the first stage.

:func:`code_roles` reads the code without running it (``ast``): the column names it reads from the answers and
from the submission (subscripts, ``in X.columns`` tests, column-set comparisons, ``issubset``/``issuperset``,
``sort_values``/``set_index``/``merge`` keys), where the side is the variable's name (``submission``, ``y_pred``:
the submission; ``answers``, ``solution``, ``y_true``: the answers). Names are resolved through simple
assignments (``id_col = "row_id"``), list constants (``TARGET_COLS = [...]``, imported from a sibling module),
list concatenations, loop variables over such lists, parameter defaults, attributes of ``self`` a metric class
sets from them (``self.value = value``) and the arguments of calls to the code's own functions; a column named by
its position (``y_true.columns[0]``) stands for no fixed name, so a list of it beside fixed names gives those.

A :class:`Schema` is what a real competitor's submission and the benchmark's answers hold: an id column (ids
``t<row>``, numbers, ``<group>_<n>`` or ``<group>_<class>``), target columns (in the answers under their own
name where the submission's is not there), columns only the submission holds, columns both hold with the same
values (a second key, e.g. a class word per row; an error naming a column the schema holds on one side only
moves it there) and columns only the answers hold: an image size (a name with the word ``height``, ``width`` or
``size``: 12, room for every synthetic mask), a box coordinate (``x_min``, ``ymax``: 0-50, the maxima 60-100)
or a boolean (a group, a row mask, an identity flag). :func:`schema_frames` builds the answers, the gold
submission (the answers' values under the submission's columns), a constant sample and a perturbed submission.
The value kinds beyond the first stage's: class probabilities (one-hot answers, rows summing to one), label
sets of words, object-detection prediction strings in the usual layouts (:data:`BOX_LAYOUTS`), and boxes
answered by their centres (``points``).

(Over 500 lines: the reading of the code and the frames its schemas build are one search's two halves, each
tested through the other; split, neither would be used alone.)
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

#: Rows of a synthetic frame (as the first stage).
N_ROWS = 60
#: Side of the image that synthetic run-length-encoded masks lie in (their last pixel is at most 88).
IMAGE_SIDE = 12
#: Object-detection prediction string layouts, one token per letter, several objects a string: ``L`` a class
#: word, ``I`` a class number, ``C`` a confidence, ``X``/``Y``/``Z`` a coordinate (its first appearance a corner or
#: centre, its second that plus a size), ``A`` an angle. Box corners with a class and confidence
#: (``L C X Y X Y``, Kaggle's usual), without a class (``C X Y X Y``), with a class number (``I C X Y X Y``), and
#: 3-D boxes (``C X Y Z X Y Z A L``: centre, size, yaw, class).
BOX_LAYOUTS = {"boxes": "L C X Y X Y", "boxes_nolabel": "C X Y X Y", "boxes_classid": "I C X Y X Y",
               "boxes_3d": "C X Y Z X Y Z A L"}
#: The answers of the ``points`` kind: boxes as ``label x y width height`` (``W``, ``H``: a size); its
#: submissions hold each box's label and centre (``label x y``), as a detector of character centres submits.
POINT_BOXES = "L X Y W H"
#: Value kinds of one target column, in the order tried (a target's name may move some first: :func:`kinds_for`).
ONE_TARGET_KINDS = ("binary", "binlabels", "continuous", "labels", "text", "labelsets", "wordsets", "sentences",
                    "rle", *BOX_LAYOUTS, "order", "points")
#: Value kinds of several target columns: class probabilities, 0/1 targets scored with probabilities, values.
SEVERAL_TARGET_KINDS = ("probs", "multibinary", "multitarget")
#: Id styles, in the order an error about the ids moves through them.
ID_STYLES = ("plain", "numeric", "composite", "classed")

_SUB = re.compile(r"sub|pred", re.I)
_ANS = re.compile(r"answer|solution|truth|gt|actual|true|expected|ans\b|label", re.I)
_SIZE = re.compile(r"(^|_)(height|width|size)(_|$)", re.I)
_COORD = re.compile(r"^[xyz]_?(min|max)$", re.I)
_ID = re.compile(r"id$|^id|_id|Id|ID$")
_WORDS = ("alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta")


@dataclass
class Roles:
    """What :func:`code_roles` read: column names of the answers and of the submission, the keys the code
    sorts or joins by, and the longest list of strings in the code (a class list), each in order of appearance."""

    answers: list[str] = field(default_factory=list)
    submission: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    classes: list[str] = field(default_factory=list)


def _add(out: list[str], names: list[str] | None) -> None:
    for n in names or []:
        if n not in out:
            out.append(n)


def _trees(code: Path) -> list[ast.AST]:
    """The parsed code and, beside MLE-bench's ``grade.py`` and MLE-Dojo's ``metric.py``, its sibling modules but
    ``prepare.py`` (it reads the raw data, not the graded files)."""
    siblings = [] if code.name.endswith("_eval.py") else sorted(
        p for p in code.parent.glob("*.py") if p != code and p.name != "prepare.py")
    out: list[ast.AST] = []
    for f in [code, *siblings]:
        try:
            out.append(ast.parse(f.read_text(encoding="utf-8", errors="replace")))
        except (SyntaxError, ValueError, OSError):
            continue
    return out


def _resolve(node: ast.AST | None, consts: dict[str, list[str]]) -> list[str] | None:
    """The strings ``node`` stands for (a constant, a list of them, a resolved name, a concatenation, ``set(x)``),
    or None. A column named by its position (``y_true.columns[0]``, or a name bound to it) stands for no fixed name
    (``[]``): the frame holds it whatever it is called, so a list naming it beside fixed names resolves to those."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "columns" \
            and not isinstance(node.slice, ast.Slice):
        return []
    if isinstance(node, ast.Name):
        return consts.get(node.id)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return consts.get(f"self.{node.attr}")
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        parts = [_resolve(e, consts) for e in node.elts]
        return None if any(p is None for p in parts) else [s for p in parts for s in p or []]
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.BitOr)):
        a, b = _resolve(node.left, consts), _resolve(node.right, consts)
        return None if a is None and b is None else (a or []) + (b or [])
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("set", "list", "sorted") \
            and node.args:
        return _resolve(node.args[0], consts)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("split", "strip"):
        text = _resolve(node.func.value, consts)  # a list written as one string: "a\nb".strip().split("\n")
        sep = _resolve(node.args[0], consts) if node.args else None
        if text is None or len(text) != 1 or (node.args and (sep is None or len(sep) != 1)):
            return None
        if node.func.attr == "strip":
            return [text[0].strip()]
        return [v for v in text[0].split(sep[0] if sep else None) if v]
    return None


def _constants(trees: list[ast.AST]) -> dict[str, list[str]]:
    """Names bound to strings or lists of strings: assignments (to a name, or to an attribute of ``self``, bound as
    ``self.<attr>``: a metric class keeps its column names there, ``self.value = value``), parameter defaults and
    the arguments of calls to the code's own functions (three passes, so chains resolve). Loop variables are bound
    in their loop only (:func:`code_roles`)."""
    consts: dict[str, list[str]] = {}
    funcs = {n.name: n for t in trees for n in ast.walk(t) if isinstance(n, ast.FunctionDef)}

    def bind(name: str, values: list[str] | None) -> None:
        if values is not None:  # [] too: a column named by its position (:func:`_resolve`)
            _add(consts.setdefault(name, []), values)
    for _ in range(3):
        for t in trees:
            for n in ast.walk(t):
                if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
                    bind(n.targets[0].id, _resolve(n.value, consts))
                elif isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Attribute) \
                        and isinstance(n.targets[0].value, ast.Name) and n.targets[0].value.id == "self":
                    bind(f"self.{n.targets[0].attr}", _resolve(n.value, consts))
                elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
                    bind(n.target.id, _resolve(n.value, consts))
                elif isinstance(n, ast.FunctionDef):
                    args = n.args.args[len(n.args.args) - len(n.args.defaults):]
                    for a, d in zip(args, n.args.defaults):
                        bind(a.arg, _resolve(d, consts))
                elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in funcs:
                    params = [a.arg for a in funcs[n.func.id].args.args]
                    for p, v in zip(params, n.args):
                        bind(p, _resolve(v, consts))
                    for k in n.keywords:
                        if k.arg in params:
                            bind(k.arg, _resolve(k.value, consts))
    return consts


def _side(node: ast.AST) -> str | None:
    """``"submission"`` or ``"answers"`` by the names in ``node`` (the submission's where both appear)."""
    names = [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]
    if any(_SUB.search(n) for n in names):
        return "submission"
    if any(_ANS.search(n) for n in names):
        return "answers"
    return None


def _has_columns(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr in ("columns", "index") for n in ast.walk(node))


def _read(n: ast.AST, consts: dict[str, list[str]], roles: Roles,
          found: list[tuple[str | None, list[str] | None]]) -> None:
    """What one node says of the columns (``found``: ``(side, names)``), the keys and the class list."""
    if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load) and not isinstance(n.slice, ast.Slice):
        found.append((_side(n.value), _resolve(n.slice, consts)))
    elif isinstance(n, ast.Compare):
        parts = [n.left, *n.comparators]
        found += [(_side(p), _resolve(q, consts)) for p in parts if _has_columns(p) for q in parts if q is not p]
    elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
        attr = n.func.attr
        if attr in ("issubset", "issuperset") and n.args:
            pair = [n.func.value, n.args[0]]
            found += [(_side(p), _resolve(q, consts)) for p, q in (pair, pair[::-1]) if _has_columns(p)]
        elif attr in ("sort_values", "set_index", "groupby", "merge", "drop_duplicates", "pivot"):
            keys: list[str] = []
            for v in [*n.args, *(k.value for k in n.keywords if k.arg in ("by", "on", "keys", "index"))]:
                _add(keys, _resolve(v, consts))
            _add(roles.keys, keys)
            found.append((_side(n.func.value), keys))
    if isinstance(n, (ast.List, ast.Tuple, ast.Set)) and len(n.elts) > len(roles.classes):
        vals = _resolve(n, consts)
        if vals and all(v.strip() and "\n" not in v and len(v) <= 80 for v in vals):
            roles.classes = vals


def code_roles(code: Path) -> Roles:
    """The columns ``code`` (and its sibling modules) reads from the answers and from the submission (module
    docstring); never raises for unreadable code (empty roles). A loop variable over a list of names stands for
    each of them inside its loop (``for col in required_answer_columns: assert col in answers.columns``)."""
    trees = _trees(Path(code))
    roles = Roles()
    found: list[tuple[str | None, list[str] | None]] = []

    def visit(n: ast.AST, consts: dict[str, list[str]]) -> None:
        inner = consts
        if isinstance(n, (ast.For, ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            inner = dict(consts)
            for g in [n] if isinstance(n, ast.For) else n.generators:
                vals = _resolve(g.iter, consts)
                if isinstance(g.target, ast.Name) and vals:
                    inner[g.target.id] = vals
        _read(n, consts, roles, found)
        for child in ast.iter_child_nodes(n):
            visit(child, inner)
    consts = _constants(trees)
    for t in trees:
        visit(t, consts)
    for side, names in found:
        if side is not None:
            _add(roles.answers if side == "answers" else roles.submission, names)
    return roles


@dataclass(frozen=True)
class Schema:
    """Columns of one synthetic format (module docstring): ``targets`` are in the submission and (under
    ``answer_names``' names where given) in the answers; ``shared`` columns are on both sides with the same values
    (a second key beside the id: a class word per row)."""

    id: str
    targets: tuple[str, ...]
    submission_only: tuple[str, ...] = ()
    answer_only: tuple[str, ...] = ()
    answer_names: tuple[tuple[str, str], ...] = ()
    ids: str = "plain"
    shared: tuple[str, ...] = ()

    def columns(self) -> tuple[str, ...]:
        """Every column name the schema holds."""
        return (self.id, *self.targets, *self.submission_only, *self.answer_only, *(a for _, a in self.answer_names),
                *self.shared)


def seeds(roles: Roles, id_col: str, target: str) -> list[Schema]:
    """The schemas first tried: the id is the first column the code reads from the submission that the answers
    are read by too and that is a key the code sorts or joins by or id-like, else such a key or id-like column
    in any order, a key of one side, an id-like column of the submission, ``id_col``; the targets the columns
    both sides read (else the submission's, else the answers', else the class list, else ``target``), sizes and
    box coordinates not; a lone submission target the answers do not read is there under the answers' one other
    non-size column (the one outside the code's longest list of names, where the others are in it: group
    columns). Columns of one side only follow each (the submission's only in a second seed: a column the code
    accepts in place of the target would clash with it); with several targets, a last seed holds the first
    alone."""
    both = [c for c in roles.submission if c in roles.answers]
    ids = [c for c in roles.submission if c in both and (c in roles.keys or _ID.search(c))]
    ids += [k for k in roles.keys if k in both] + [c for c in both if _ID.search(c)]
    ids += [k for k in roles.keys if k in roles.submission or k in roles.answers]
    ids += [c for c in roles.submission if _ID.search(c)] + [id_col]
    sid = ids[0]
    targets: list[str] = []
    for side in (both, roles.submission, roles.answers):
        targets = targets or [c for c in side if c != sid and not _SIZE.search(c) and not _COORD.search(c)]
    if not targets:
        targets = [c for c in roles.classes if c != sid] if len(roles.classes) >= 2 else \
            [target if target != sid else "target"]
    ans_only = [c for c in roles.answers if c != sid and c not in targets and c not in roles.submission]
    others = [c for c in ans_only if not _SIZE.search(c)]
    if len(others) > 1:  # beside a list of group columns (identity flags the code loops over), the one other
        others = [c for c in others if c not in roles.classes] or others
    renamed = [(targets[0], others[0])] if len(targets) == 1 and targets[0] not in roles.answers and \
        len(others) == 1 else []
    ans_only = [c for c in ans_only if c not in [a for _, a in renamed]]
    sub_only = [c for c in roles.submission if c != sid and c not in targets and c not in roles.answers]
    base = Schema(sid, tuple(targets), (), tuple(ans_only), tuple(renamed))
    out = [base, replace(base, submission_only=tuple(sub_only))] if sub_only else [base]
    if len(targets) > 1:  # the code may read frames it built from one target (a pivot of class rows)
        out.append(replace(base, targets=tuple(targets[:1]), answer_names=tuple(renamed[:1])))
    return out


def kinds_for(schema: Schema) -> tuple[str, ...]:
    """The value kinds tried for ``schema``'s targets: several-target kinds for several, else the one-target
    kinds with those its name suggests first (a mask, a prediction string, labels)."""
    if len(schema.targets) > 1:
        return SEVERAL_TARGET_KINDS
    name = schema.targets[0]
    first: tuple[str, ...] = ()
    if re.search(r"rle|mask|encod|pixel|segment|predicted", name, re.I):
        first = ("rle",)
    elif re.search(r"string|box", name, re.I):
        first = tuple(BOX_LAYOUTS)
    elif re.search(r"label|class|species|categor|breed|^Id$", name, re.I):
        first = ("labels", "wordsets", "labelsets", "text")
    return first + tuple(k for k in ONE_TARGET_KINDS if k not in first)


def _ids(style: str, n: int, classes: list[str]) -> list[object]:
    if style == "numeric":
        return [1000 + i for i in range(n)]
    if style == "composite":
        return [f"t{i // 3}_{i % 3}" for i in range(n)]
    if style == "classed":
        return [f"t{i // len(classes)}_{classes[i % len(classes)]}" for i in range(n)]
    return [f"t{i}" for i in range(n)]


def _boxes(layout: str, rng: np.random.Generator, n_objects: int, confidence: float | None = None) -> str:
    """One prediction string of ``n_objects`` objects in ``layout`` (:data:`BOX_LAYOUTS`)."""
    objs = []
    for _ in range(n_objects):
        seen: dict[str, float] = {}
        toks = []
        for t in layout.split():
            if t == "L":
                toks.append(str(rng.choice(_WORDS[:3])))
            elif t == "I":
                toks.append(str(int(rng.integers(0, 3))))
            elif t == "C":
                toks.append(f"{confidence if confidence is not None else rng.uniform(0.3, 1.0):.3f}")
            elif t == "A":
                toks.append(f"{rng.uniform(0, 3):.3f}")
            elif t in ("W", "H"):
                toks.append(f"{rng.uniform(10, 40):.2f}")
            elif t in seen:
                toks.append(f"{seen.pop(t) + rng.uniform(10, 40):.2f}")
            else:
                seen[t] = float(rng.uniform(0, 50))
                toks.append(f"{seen[t]:.2f}")
        objs.append(" ".join(toks))
    return " ".join(objs)


def centres(s: str) -> str:
    """The ``label x y`` centre of each ``label x y width height`` box of ``s`` (:data:`POINT_BOXES`)."""
    t = s.split()
    return " ".join(f"{t[i]} {float(t[i + 1]) + float(t[i + 3]) / 2:.2f} {float(t[i + 2]) + float(t[i + 4]) / 2:.2f}"
                    for i in range(0, len(t), 5))


def _jitter_boxes(s: str, rng: np.random.Generator) -> str:
    """``s`` with each number but class numbers moved by at most 1 (confidences redrawn below 1)."""
    out = []
    for tok in s.split():
        try:
            v = float(tok)
        except ValueError:
            out.append(tok)
            continue
        out.append(tok if tok.isdigit() else f"{v + rng.uniform(-1, 1) if v >= 1 else rng.uniform(0.3, 1.0):.3f}")
    return " ".join(out)


def one_target_values(kind: str, rng: np.random.Generator, n: int = N_ROWS) -> tuple[pd.Series, object, pd.Series]:
    """``(answers, sample value, perturbed submission)`` of ``n`` rows of one target of ``kind``
    (:data:`ONE_TARGET_KINDS`; ``rows`` as ``continuous``; the sample value None for an ordering: the sample is
    each row's tokens reversed; for ``points`` the answers are boxes and the submissions their centres,
    :func:`centres`). Texts, label sets and masks are perturbed by swapping 30 % of the rows, class labels by
    redrawing 25 %, prediction strings and centres by moving every number by at most 1 and swapping 30 %."""
    if kind == "binary":
        y = pd.Series(np.r_[np.zeros(n // 2, int), np.ones(n - n // 2, int)][rng.permutation(n)])
        return y, 0.5, (y * 0.6 + 0.2 + rng.uniform(-0.15, 0.15, n)).clip(0.01, 0.99).round(4)
    if kind == "binlabels":
        y = pd.Series(np.r_[np.zeros(n // 2, int), np.ones(n - n // 2, int)][rng.permutation(n)])
        flip = rng.random(n) < 0.25
        return y, 0, y.where(~flip, 1 - y)
    if kind in ("continuous", "rows"):
        y = pd.Series(rng.uniform(1.0, 100.0, n).round(3))
        return y, float(y.median()), (y * rng.uniform(0.8, 1.2, n)).clip(y.min(), y.max()).round(3)
    if kind in ("labels", "text"):
        labels = np.array([0, 1, 2, 3]) if kind == "labels" else np.array(_WORDS[:4])
        y = pd.Series(labels[rng.integers(0, 4, n)])
        flip = rng.random(n) < 0.25
        p = y.copy()
        p[flip] = labels[rng.integers(0, 4, int(flip.sum()))]
        return y, labels[0].item(), p
    words = np.array(_WORDS)
    sample: object
    if kind == "sentences":
        y = pd.Series([" ".join(rng.choice(words, rng.integers(2, 6))) + f" w{i}" for i in range(n)])
        sample = "alpha beta"
    elif kind == "labelsets":
        y = pd.Series([" ".join(map(str, sorted(rng.choice(40, rng.integers(1, 4), replace=False))))
                       for _ in range(n)])
        sample = "0 1 2"
    elif kind == "wordsets":
        y = pd.Series([" ".join(sorted(rng.choice(words, int(rng.integers(1, 4)), replace=False))) for _ in range(n)])
        sample = _WORDS[0]
    elif kind == "order":
        y = pd.Series([" ".join(f"c{i}x{j}" for j in range(int(rng.integers(3, 7)))) for i in range(n)])
        return y, None, y.map(lambda t: " ".join(rng.permutation(t.split())))
    elif kind == "rle":
        y = pd.Series([f"{s} {rng.integers(1, 20)} {s + 40} {rng.integers(1, 20)}" for s in rng.integers(1, 30, n)])
        sample = "1 1"
    elif kind in BOX_LAYOUTS:
        y = pd.Series([_boxes(BOX_LAYOUTS[kind], rng, int(rng.integers(1, 3)), confidence=1.0) for _ in range(n)])
        sample = _boxes(BOX_LAYOUTS[kind], rng, 1, confidence=0.5)
    elif kind == "points":
        y = pd.Series([_boxes(POINT_BOXES, rng, int(rng.integers(1, 3))) for _ in range(n)])
        p = y.map(centres).map(lambda s: _jitter_boxes(s, rng))
        flip = rng.random(n) < 0.3
        p[flip] = p.sample(frac=1.0, random_state=int(rng.integers(1 << 31))).to_numpy()[flip]
        return y, f"{_WORDS[0]} 1 1", p
    else:
        raise ValueError(f"unknown synthetic value kind {kind!r}; use one of {ONE_TARGET_KINDS}")
    p = y.map(lambda s: _jitter_boxes(s, rng)) if kind in BOX_LAYOUTS else y.copy()
    flip = rng.random(n) < 0.3
    p[flip] = y.sample(frac=1.0, random_state=int(rng.integers(1 << 31))).to_numpy()[flip]
    return y, sample, p


def several_target_values(kind: str, cols: tuple[str, ...], n: int, rng: np.random.Generator
                          ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """``(answers, sample, perturbed)`` blocks of several targets: class probabilities (one-hot answers, a
    uniform sample, rows of the perturbed summing to one), 0/1 targets scored with probabilities, values."""
    k = len(cols)
    if kind == "probs":
        y = pd.DataFrame(np.eye(k, dtype=int)[rng.integers(0, k, n)], columns=list(cols))
        s = pd.DataFrame(np.full((n, k), 1.0 / k), columns=list(cols))
        raw = 0.6 * y.to_numpy() + 0.4 * rng.dirichlet(np.ones(k), n)
        return y, s, pd.DataFrame(raw / raw.sum(axis=1, keepdims=True), columns=list(cols))
    if kind == "multibinary":
        y = pd.DataFrame({c: rng.integers(0, 2, n) for c in cols})
        p = (y * 0.6 + 0.2 + rng.uniform(-0.15, 0.15, y.shape)).clip(0.01, 0.99).round(4)
        return y, pd.DataFrame({c: 0.5 for c in cols}, index=y.index), p
    y = pd.DataFrame({c: rng.uniform(1.0, 100.0, n).round(3) for c in cols})
    p = (y * rng.uniform(0.8, 1.2, y.shape)).clip(y.min(), y.max(), axis=1).round(3)
    return y, pd.DataFrame({c: float(y[c].median()) for c in cols}, index=y.index), p


def schema_frames(schema: Schema, kind: str, classes: list[str], rng: np.random.Generator
                  ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame] | None:
    """``(answers, gold submission, sample submission, perturbed submission)`` of ``schema`` with targets of
    ``kind``, or None where the schema cannot hold it (``classed`` ids without a class list, several-target kinds
    for one target and the reverse)."""
    several = kind in SEVERAL_TARGET_KINDS
    if several != (len(schema.targets) > 1) or (schema.ids == "classed" and len(classes) < 2):
        return None
    n = len(classes) * max(1, N_ROWS // len(classes)) if schema.ids == "classed" else N_ROWS
    ids = pd.Series(_ids(schema.ids, n, classes), name=schema.id)
    if several:
        y, s, p = several_target_values(kind, schema.targets, n, rng)
    else:
        t = schema.targets[0]
        yv, sv, pv = one_target_values(kind, rng, n)
        if sv is None:  # an ordering: the sample is the tokens reversed
            sv = yv.map(lambda x: " ".join(reversed(x.split())))
        y, p = yv.rename(t).to_frame(), pv.rename(t).to_frame()
        s = (sv if isinstance(sv, pd.Series) else pd.Series([sv] * n)).rename(t).to_frame()
    y, s, p = (d.reset_index(drop=True) for d in (y, s, p))
    extra = pd.DataFrame({**{c: rng.uniform(1.0, 100.0, n).round(3) for c in schema.submission_only},
                          **{c: [_WORDS[i % 3] for i in range(n)] for c in schema.shared}})
    g = y.map(centres) if kind == "points" else y
    gold, sample, pert = (pd.concat([ids, d, extra], axis=1) for d in (g, s, p))
    ans_cols = {c: (np.full(n, IMAGE_SIDE) if _SIZE.search(c) else
                    rng.uniform(60, 100, n).round(2) if _COORD.search(c) and "max" in c.lower() else
                    rng.uniform(0, 50, n).round(2) if _COORD.search(c) else rng.permutation(np.arange(n) % 2 == 0))
                for c in schema.answer_only}
    answers = pd.concat([ids, y.rename(columns=dict(schema.answer_names)), pd.DataFrame(ans_cols),
                         extra[list(schema.shared)]], axis=1)
    return answers, gold, sample, pert


def error_side(line: str) -> str | None:
    """Which side an error line speaks of: ``"submission"``, ``"answers"`` or None."""
    if re.search(r"(?i)submission|predict", line):
        return "submission"
    if re.search(r"(?i)answers?\b|ground truth|solution|true", line):
        return "answers"
    return None


def learn(schema: Schema, named: list[str], line: str, roles: Roles) -> Schema | None:
    """``schema`` with the columns an error ``line`` names (``named``) that it lacks: a column both sides of the
    code read becomes a target; one the answers' side reads (or the error speaks of the answers) an answers-only
    column; else a submission-only one. A named column the schema holds on one side only, where the error calls it
    extra or unexpected (the code wants it on both: ``submission columns - answer columns`` must be empty), becomes
    shared. None when the error names no column to add or move."""
    one_side = [c for c in named if c in schema.submission_only or c in schema.answer_only]
    if one_side and re.search(r"(?i)extra|unexpected", line):
        return replace(schema, submission_only=tuple(c for c in schema.submission_only if c not in one_side),
                       answer_only=tuple(c for c in schema.answer_only if c not in one_side),
                       shared=(*schema.shared, *one_side))
    new = [c for c in named if c not in schema.columns() and "." not in c]
    if not new:
        return None
    side = error_side(line)
    targets, sub_only, ans_only = list(schema.targets), list(schema.submission_only), list(schema.answer_only)
    for c in new:
        if c in roles.answers and c in roles.submission:
            targets.append(c)
        elif c in roles.answers or (side == "answers" and c not in roles.submission):
            ans_only.append(c)
        elif c in roles.submission or side == "submission":
            sub_only.append(c)
        else:
            targets.append(c)
    return replace(schema, targets=tuple(targets), submission_only=tuple(sub_only), answer_only=tuple(ans_only))


def next_id_style(style: str, line: str, named: list[str], classes: list[str]) -> str | None:
    """The id style to try after an error ``line`` (naming the columns ``named``) about the ids: numbers where the
    code converts the synthetic ``t0``; ``<group>_<n>`` and then ``<group>_<class>`` where it splits them; and
    ``<group>_<class>`` where, the ids split, it looks for the class list's columns (a pivot of the ids' parts).
    None where the error is not about the ids."""
    if style == "plain" and re.search(r"""(convert|numeric|float|int|parse).*["']t[\d_]""", line):
        return "numeric"
    if style == "composite" and any(n in classes for n in named):
        return "classed"
    if re.search(r"split|unpack|same length as key", line):
        later = [s for s in ID_STYLES[ID_STYLES.index(style) + 1:] if s != "numeric"]
        return later[0] if later else None
    return None
