"""Render every run-derived table and number of README.md and docs/*.md from the committed results.

A rendered region sits between two HTML comments (invisible on the rendered page)::

    <!-- rendered: bench-table studies/benchmark methods=grpo,wm,wmrl -->
    ...written by this script...
    <!-- end rendered -->

and a number inside a sentence the same way on one line:
``<!-- rendered: mean-se studies/benchmark:wmrl train_percentile digits=2 -->0.83 ± 0.05<!-- end rendered -->``.
The text between the comments is replaced; everything else of the page is left as it is. Directories are
relative to the repository root and hold a bench's committed ``results.csv`` (one row per run, written by
``wmrl bench``); the statistics are wmrl's own (:mod:`wmrl.report.bench_stats`, the bench's table code), so a
rendered table reads exactly as the bench's ``bench.md`` does.

Directives (``A`` and ``B`` are ``DIR:method``; ``digits=N`` sets the decimals, default 3):

- ``bench-table DIR [methods=m1,m2] [columns=c1;c2] [initial=yes|no]``: the bench table (the columns of
  :func:`wmrl.report.bench_page.bench_table`, optionally a subset, in that order), with the initial policy's row;
- ``multiturn-table DIR [columns=c1;c2]``: the multi-turn table of :func:`wmrl.report.bench_page.multiturn_table`;
- ``per-seed COLUMN A [A ...]``: one row per seed of ``COLUMN`` for each run set, and a ``mean ± SE`` row;
- ``mean A COLUMN``, ``mean-se A COLUMN``: over seeds;
- ``paired A B COLUMN``: mean ± SE over seeds of A - B on the seeds both have (signed);
- ``range A COLUMN``: the smallest and largest per-seed value, ``lo-hi``;
- ``ratio DIR method [corpus=yes] [cached=yes]``: training compute relative to the bench's GRPO (``0.13x``), with
  the shared corpus charged in full when ``corpus=yes``; ``cached=yes``: the corpus charged, against GRPO with the
  exact execution cache (its repeats' sandbox CPU taken off);
- ``corpus DIR``: the shared warm-up corpus's compute, CPU-seconds (``corpus_cpu_s``), no decimals;
- ``seeds A``: the number of finished seeds;
- ``table FILE [n=N] [columns=c1;c2] [where=COL:v1|v2;COL2:v3]``: the N-th Markdown table (default 1) of a
  committed file (a study's ``summary.md``, a bench's table), its columns optionally a subset in the order given,
  its rows optionally only those whose cell in COL (bold and code marks ignored) is one of the values;
- ``cell FILE [n=N] where=... columns=COL``: the one cell of such a table that ``where`` and ``columns`` leave
  (bold and code marks dropped);
- ``json FILE PATH [digits=N] [scale=X] [ci=yes]``: one value of a committed JSON file. PATH is keys and list
  positions joined by ``/``; a part ``k=v,k2=v2`` picks the first object of a list with those fields (values
  compared as text). ``scale`` multiplies the value (``scale=100`` for a percentage); ``ci=yes`` reads an object
  ``{"value", "lo", "hi"}`` and writes ``value [lo, hi]``.

Usage (from the repository root)::

    python studies/render_docs.py            # rewrite the rendered regions of README.md and docs/*.md
    python studies/render_docs.py --check    # exit 1 and name every page whose rendered regions differ

``tests/test_docs_rendered.py`` runs the check in memory, so a changed results file fails the tests until the
pages are rendered again. A directive this script cannot read (unknown name, missing file or method) ends the
run with one line naming the page and the directive.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pandas as pd

from wmrl.report.bench_page import bench_table, multiturn_table
from wmrl.report.bench_stats import INITIAL, MethodRow, aggregate, initial_row
from wmrl.report.stats import MeanSE, mean_se, paired_difference
from wmrl.report.tables import Table

ROOT = Path(__file__).resolve().parents[1]
#: One rendered region: the directive, then the rendered text (lazily, up to the first end marker).
REGION = re.compile(r"<!-- rendered: (?P<directive>[^\n]*?) -->(?P<body>.*?)<!-- end rendered -->", re.S)


#: The option names of the directives (``name=value``); any other word is an argument (a JSON path may hold ``=``).
OPTIONS = frozenset({"digits", "methods", "columns", "initial", "corpus", "cached", "n", "where", "scale", "ci"})


class RenderError(ValueError):
    """A directive that cannot be rendered; the message names what is wrong."""


def pages(root: Path = ROOT) -> list[Path]:
    """The pages rendered: README.md and docs/*.md."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


@cache
def _results(folder: Path) -> pd.DataFrame:
    path = folder / "results.csv"
    if not path.is_file():
        raise RenderError(f"{path} does not exist (a bench folder's committed results.csv)")
    return pd.read_csv(path)


class Renderer:
    """Renders directives against the committed results under ``root`` (the repository by default)."""

    def __init__(self, root: Path = ROOT) -> None:
        self.root = root

    def results(self, folder: str) -> pd.DataFrame:
        """``folder/results.csv`` (relative to the root) as a DataFrame; :class:`RenderError` when absent."""
        return _results((self.root / folder).resolve())

    def _by_seed(self, spec: str, column: str) -> dict[int, float]:
        folder, sep, method = spec.partition(":")
        if not sep:
            raise RenderError(f"{spec!r} should be DIR:method")
        df = self.results(folder)
        if column not in df:
            raise RenderError(f"{folder}/results.csv has no column {column!r}")
        g = df[df["method"] == method]
        if g.empty:
            raise RenderError(f"{folder}/results.csv has no run of method {method!r}")
        return {int(s): float(v) for s, v in zip(g["seed"], pd.to_numeric(g[column], errors="coerce"))}

    def _rows(self, folder: str) -> dict[str, MethodRow]:
        df = self.results(folder)
        rows = {r.method: r for r in aggregate(df)}
        init = initial_row(df)
        if init is not None:
            rows[INITIAL] = init
        return rows

    def render(self, directive: str) -> str:
        """The text of one directive (see the module docstring); :class:`RenderError` when it cannot be read."""
        words = shlex.split(directive)
        if not words:
            raise RenderError("an empty directive")
        is_opt = [w.partition("=")[0] in OPTIONS and "=" in w for w in words[1:]]
        args = [w for w, o in zip(words[1:], is_opt) if not o]
        opts = dict(w.split("=", 1) for w, o in zip(words[1:], is_opt) if o)
        digits = int(opts.pop("digits", 3))
        handlers: dict[str, Callable[[], str]] = {
            "bench-table": lambda: self._bench_table(args, opts),
            "multiturn-table": lambda: self._multiturn_table(args, opts),
            "per-seed": lambda: self._per_seed(args, digits),
            "mean": lambda: _fmt(mean_se(list(self._by_seed(*args).values())).mean, digits),
            "mean-se": lambda: mean_se(list(self._by_seed(*args).values())).fmt(digits),
            "paired": lambda: _signed(paired_difference(self._by_seed(args[0], args[2]),
                                                        self._by_seed(args[1], args[2])), digits),
            "range": lambda: _range(self._by_seed(*args), digits),
            "ratio": lambda: self._ratio(args, opts),
            "corpus": lambda: f"{float(self.results(args[0])['corpus_cpu_s'].max()):.0f}",
            "seeds": lambda: str(len(self._by_seed(args[0], "seed"))),
            "table": lambda: self._table(args, opts),
            "cell": lambda: self._cell(args, opts),
            "json": lambda: self._json(args, opts, digits),
        }
        if words[0] not in handlers:
            raise RenderError(f"unknown directive {words[0]!r} (one of {', '.join(handlers)})")
        try:
            return handlers[words[0]]()
        except RenderError:
            raise
        except (TypeError, IndexError, ValueError) as e:
            raise RenderError(f"{words[0]!r} got the wrong arguments ({e}); see studies/render_docs.py") from e

    def _bench_table(self, args: list[str], opts: dict[str, str]) -> str:
        rows = self._rows(args[0])
        methods = opts["methods"].split(",") if "methods" in opts else [m for m in rows if m != INITIAL]
        missing = [m for m in methods if m not in rows]
        if missing:
            raise RenderError(f"{args[0]}/results.csv has no run of {', '.join(missing)}")
        if opts.get("initial", "yes") == "yes" and INITIAL in rows:
            methods = [*methods, INITIAL]
        return _markdown(bench_table([rows[m] for m in methods]), opts)

    def _multiturn_table(self, args: list[str], opts: dict[str, str]) -> str:
        table = multiturn_table(self.results(args[0]))
        if table.empty:
            raise RenderError(f"{args[0]}/results.csv holds no multi-turn runs")
        return _markdown(table, opts)

    def _per_seed(self, args: list[str], digits: int) -> str:
        column, specs = args[0], args[1:]
        if not specs:
            raise RenderError("per-seed needs COLUMN and at least one DIR:method")
        cols = [self._by_seed(s, column) for s in specs]
        names = [s.partition(":")[2] for s in specs]
        if len(set(names)) < len(names):
            names = [s.replace(":", " ") for s in specs]
        seeds = sorted({s for c in cols for s in c})
        lines = ["| seed | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 1)]
        lines += [f"| {s} | " + " | ".join(_fmt(c.get(s, math.nan), digits) for c in cols) + " |" for s in seeds]
        lines.append("| mean ± SE | " + " | ".join(mean_se(list(c.values())).fmt(digits) for c in cols) + " |")
        return "\n" + "\n".join(lines) + "\n"

    def _ratio(self, args: list[str], opts: dict[str, str]) -> str:
        folder, method = args
        row = self._rows(folder).get(method)
        if row is None:
            raise RenderError(f"{folder}/results.csv has no run of {method!r}")
        if opts.get("cached") == "yes":
            r = row.compute_ratio_cached
            if r is None:
                raise RenderError(f"{folder}: no ratio against the cached GRPO for {method!r} (its GRPO runs' "
                                  "results.csv has no train_repeat_sandbox_cpu_s: tabulate from the run folders)")
        else:
            r = row.compute_ratio_corpus if opts.get("corpus") == "yes" else row.compute_ratio
        if r is None:
            raise RenderError(f"{folder}: no compute ratio for {method!r} (no GRPO run to compare with)")
        return f"{r:.2f}x"


    def _file(self, name: str) -> Path:
        path = (self.root / name).resolve()
        if not path.is_file():
            raise RenderError(f"{name} does not exist (a committed results file)")
        return path

    def _select(self, args: list[str], opts: dict[str, str]) -> tuple[list[str], list[list[str]]]:
        """The header and rows of a ``table``/``cell`` directive, after ``where=`` and ``columns=``."""
        (name,) = args
        tables = markdown_tables(self._file(name).read_text(encoding="utf-8"))
        n = int(opts.get("n", 1))
        if not 1 <= n <= len(tables):
            raise RenderError(f"{name} has {len(tables)} Markdown tables, not a table number {n}")
        header, rows = tables[n - 1]
        for cond in filter(None, opts.get("where", "").split(";")):
            col, sep, values = cond.partition(":")
            if not sep or col not in header:
                raise RenderError(f"where={cond!r}: should be COLUMN:v1|v2 with a column of {name} table {n}")
            i, keep = header.index(col), set(values.split("|"))
            rows = [r for r in rows if _plain(r[i]) in keep]
        if not rows:
            raise RenderError(f"no row of {name} table {n} is left by where={opts.get('where')!r}")
        keep_cols = opts["columns"].split(";") if "columns" in opts else header
        unknown = [c for c in keep_cols if c not in header]
        if unknown:
            raise RenderError(f"no column {unknown[0]!r} in {name} table {n} (columns: {header})")
        idx = [header.index(c) for c in keep_cols]
        return keep_cols, [[r[i] for i in idx] for r in rows]

    def _table(self, args: list[str], opts: dict[str, str]) -> str:
        header, rows = self._select(args, opts)
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n" + "\n".join(lines) + "\n"

    def _cell(self, args: list[str], opts: dict[str, str]) -> str:
        header, rows = self._select(args, opts)
        if len(header) != 1 or len(rows) != 1:
            raise RenderError(f"cell {args[0]}: where= and columns= leave {len(rows)} rows x {len(header)} "
                              "columns, not one cell")
        return _plain(rows[0][0])

    def _json(self, args: list[str], opts: dict[str, str], digits: int) -> str:
        name, path = args
        node: object = json.loads(self._file(name).read_text(encoding="utf-8"))
        for part in path.split("/"):
            node = _step(node, part, f"{name}: {path!r}")
        scale = float(opts.get("scale", 1))
        if opts.get("ci") == "yes":
            if not isinstance(node, dict) or not {"value", "lo", "hi"} <= node.keys():
                raise RenderError(f"{name}: {path!r} is not an object with value, lo and hi")
            v, lo, hi = (_number(node[k], name, path) * scale for k in ("value", "lo", "hi"))
            return f"{_fmt(v, digits)} [{_fmt(lo, digits)}, {_fmt(hi, digits)}]"
        return _fmt(_number(node, name, path) * scale, digits)


def markdown_tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every Markdown table of ``text`` as (header cells, rows of cells), cells stripped; a cell may hold an
    escaped ``\\|``."""
    tables: list[tuple[list[str], list[list[str]]]] = []
    block: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            block.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
            continue
        if len(block) >= 2 and all(set(c) <= set("-: ") for c in block[1]):
            tables.append((block[0], block[2:]))
        block = []
    return tables


def _plain(cell: str) -> str:
    return cell.replace("**", "").replace("`", "").strip()


def _step(node: object, part: str, where: str) -> object:
    """One part of a JSON path: a key, a list position, or ``k=v,...`` (the first object of a list with those
    fields)."""
    if isinstance(node, dict) and part in node:
        return node[part]
    if isinstance(node, list):
        if part.isdigit() and int(part) < len(node):
            return node[int(part)]
        if "=" in part:
            want = dict(kv.split("=", 1) for kv in part.split(","))
            for item in node:
                if isinstance(item, dict) and all(str(item.get(k)) == v for k, v in want.items()):
                    return item
    raise RenderError(f"{where}: nothing at {part!r}")


def _number(x: object, name: str, path: str) -> float:
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise RenderError(f"{name}: {path!r} is {x!r}, not a number")
    return float(x)


def _markdown(table: Table, opts: dict[str, str]) -> str:
    """The table as Markdown on lines of its own, with only the ``columns=`` of ``opts`` when given."""
    if "columns" in opts:
        keep = opts["columns"].split(";")
        unknown = [c for c in keep if c not in table.columns]
        if unknown:
            raise RenderError(f"no column {unknown[0]!r} in the table (columns: {table.columns})")
        table = table.drop([c for c in table.columns if c not in keep])
    return "\n" + table.to_markdown() + "\n"


def _fmt(x: float, digits: int) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:.{digits}f}"


def _signed(m: MeanSE, digits: int) -> str:
    if m.n == 0:
        return "n/a"
    return f"{m.mean:+.{digits}f}" + ("" if math.isnan(m.se) else f" ± {m.se:.{digits}f}")


def _range(by_seed: dict[int, float], digits: int) -> str:
    vals = [v for v in by_seed.values() if math.isfinite(v)]
    return f"{_fmt(min(vals), digits)}-{_fmt(max(vals), digits)}" if vals else "n/a"


def render_text(text: str, renderer: Renderer) -> str:
    """``text`` with every rendered region written again from the committed results."""
    def one(m: re.Match[str]) -> str:
        body = renderer.render(m.group("directive"))
        return f"<!-- rendered: {m.group('directive')} -->{body}<!-- end rendered -->"

    return REGION.sub(one, text)


def stale_pages(root: Path = ROOT) -> list[Path]:
    """The pages whose rendered regions differ from a fresh rendering (nothing is written)."""
    renderer = Renderer(root)
    return [p for p in pages(root) if render_text(p.read_text(encoding="utf-8"), renderer)
            != p.read_text(encoding="utf-8")]


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring); returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 when a page is not up to date")
    a = ap.parse_args(argv)
    renderer = Renderer()
    changed = []
    for page in pages():
        old = page.read_text(encoding="utf-8")
        try:
            new = render_text(old, renderer)
        except RenderError as e:
            print(f"{page.relative_to(ROOT)}: {e}", file=sys.stderr)
            return 2
        if new != old:
            changed.append(page.relative_to(ROOT))
            if not a.check:
                page.write_text(new, encoding="utf-8")
    for p in changed:
        print(f"{p}: {'differs from the committed results' if a.check else 'rendered'}")
    if a.check and changed:
        print("render them with: python studies/render_docs.py", file=sys.stderr)
    return 1 if a.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
