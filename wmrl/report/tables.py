"""One table model for every table wmrl writes: a :class:`Table` of :class:`Cell` s, rendered to
Markdown, HTML and CSV by three small renderers (so a table's text is the same in all three).

A cell holds a value, optionally a standard error, and a format: ``Cell(0.512, 0.031, ".3f")`` reads
``0.512 ± 0.031`` everywhere. Cells without a format follow one rule: ``None`` is empty, a NaN float is
``n/a``, other floats have 4 significant digits, anything else is ``str(value)``.
"""
from __future__ import annotations

import csv
import html
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd


@dataclass(frozen=True)
class Cell:
    """One table cell: ``value`` (number, string or None), its standard error ``se`` and ``fmt``.

    ``fmt`` is a format spec (``".3f"``) applied to the value and the SE; with it, a value that is not
    finite reads ``na``. An SE that is None or NaN is left out (one seed: the mean alone).
    """

    value: Any = None
    se: float | None = None
    fmt: str = ""
    na: str = "n/a"

    @classmethod
    def mean_se(cls, m: Any, digits: int = 3) -> Cell:
        """A cell for a :class:`wmrl.report.stats.MeanSE` (``"n/a"`` when it has no values)."""
        return cls(m.mean if m.n else math.nan, m.se, f".{digits}f")

    def text(self) -> str:
        """The cell as the reader sees it (the same in Markdown, HTML and CSV)."""
        v = self.value
        if v is None:
            return ""
        if isinstance(v, str):
            return v
        if self.fmt and isinstance(v, (int, float)) and not isinstance(v, bool):
            if not math.isfinite(v):
                return self.na
            s = format(v, self.fmt)
            if self.se is not None and math.isfinite(self.se):
                s += " ± " + format(self.se, self.fmt)
            return s
        if isinstance(v, float):
            return self.na if math.isnan(v) else f"{v:.4g}"
        return str(v)


def _cell(v: Any) -> Cell:
    return v if isinstance(v, Cell) else Cell(v)


@dataclass
class Table:
    """Named columns and rows of cells; see the module docstring."""

    columns: list[str]
    rows: list[list[Cell]] = field(default_factory=list)

    @classmethod
    def from_records(cls, records: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> Table:
        """A table from dicts of column -> :class:`Cell` (or a plain value); columns in first-seen order."""
        cols = list(columns) if columns is not None else list(dict.fromkeys(k for r in records for k in r))
        return cls(cols, [[_cell(r.get(c)) for c in cols] for r in records])

    @classmethod
    def from_frame(cls, df: pd.DataFrame) -> Table:
        """A table of ``df``'s columns and rows (index dropped), each value a plain cell."""
        return cls([str(c) for c in df.columns], [[Cell(v) for v in rec] for rec in df.itertuples(index=False)])

    @property
    def empty(self) -> bool:
        """True when the table has no rows."""
        return not self.rows

    def drop(self, names: Iterable[str]) -> Table:
        """The table without the named columns."""
        gone = set(names)
        keep = [i for i, c in enumerate(self.columns) if c not in gone]
        return Table([self.columns[i] for i in keep], [[r[i] for i in keep] for r in self.rows])

    def column(self, name: str) -> list[Cell]:
        """The cells of one column, top to bottom."""
        i = self.columns.index(name)
        return [r[i] for r in self.rows]

    def texts(self) -> list[list[str]]:
        """Every row as the texts of its cells."""
        return [[c.text() for c in r] for r in self.rows]

    def to_frame(self) -> pd.DataFrame:
        """The table as a DataFrame of cell texts (for reading, e.g. ``.set_index("method")``)."""
        return pd.DataFrame(self.texts(), columns=self.columns)

    def to_markdown(self) -> str:
        """A GitHub-flavoured Markdown table (pipes in cells escaped, newlines to spaces)."""
        def md(s: str) -> str:
            return s.replace("|", "\\|").replace("\n", " ")

        lines = ["| " + " | ".join(self.columns) + " |", "|" + "|".join(["---"] * len(self.columns)) + "|"]
        lines += ["| " + " | ".join(md(t) for t in row) + " |" for row in self.texts()]
        return "\n".join(lines)

    def to_html(self) -> str:
        """An HTML ``<table>`` (header and cells escaped)."""
        def esc(s: str) -> str:
            return html.escape(s, quote=True)

        head = "".join(f"<th>{esc(c)}</th>" for c in self.columns)
        body = "".join("<tr>" + "".join(f"<td>{esc(t)}</td>" for t in row) + "</tr>" for row in self.texts())
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def to_csv(self, path: str | Path | None = None) -> str:
        """CSV text (a header line, then one line per row; minimal quoting); written to ``path`` if given."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(self.columns)
        w.writerows(self.texts())
        text = buf.getvalue()
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text
