"""Self-contained HTML pages: matplotlib figures embedded as base64 PNGs, tables, one template.

Uses only the standard library's :class:`string.Template` and :func:`html.escape` (no template
engine dependency). Pages have no external resources, so they can be mailed or committed as is.
"""
from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from string import Template
from typing import Any

import pandas as pd

from wmrl.report.tables import Table

PAGE = Template(
    """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>$title</title>
<style>
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1200px; padding: 0 1em; color: #222; line-height: 1.45; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; border-bottom: 1px solid #ddd; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; margin: .8em 0; font-size: .92em; }
th, td { border: 1px solid #ccc; padding: .3em .6em; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
img { max-width: 100%; height: auto; border: 1px solid #eee; margin: .5em 0; }
pre, code { background: #f6f6f6; font-size: .88em; } pre { padding: .6em; overflow-x: auto; }
.note { color: #555; font-size: .92em; } .warn { color: #a33; }
details { margin: .4em 0; }
</style>
</head>
<body>
<h1>$title</h1>
$body
</body>
</html>
"""
)


def esc(text: Any) -> str:
    """HTML-escape ``str(text)``."""
    return html.escape(str(text), quote=True)


def figure_to_data_uri(fig: Any, dpi: int = 100) -> str:
    """Render a matplotlib Figure to ``data:image/png;base64,...`` and close it (frees memory)."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 - heavy (matplotlib)

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def img_tag(fig: Any, alt: str) -> str:
    """An ``<img>`` element holding ``fig`` as an embedded PNG (the figure is closed)."""
    return f'<img alt="{esc(alt)}" src="{figure_to_data_uri(fig)}">'


def table_html(df: pd.DataFrame) -> str:
    """An HTML ``<table>`` for ``df`` (index dropped; cells escaped; floats to 4 significant digits):
    :meth:`wmrl.report.tables.Table.to_html`."""
    return Table.from_frame(df).to_html()


def table_markdown(df: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table for ``df`` (pipes in cells escaped; floats as in HTML):
    :meth:`wmrl.report.tables.Table.to_markdown`."""
    return Table.from_frame(df).to_markdown()


def section(heading: str, *parts: str) -> str:
    """An ``<h2>`` heading followed by already-rendered HTML ``parts``."""
    return f"<h2>{esc(heading)}</h2>\n" + "\n".join(parts)


def paragraph(text: str, cls: str = "") -> str:
    """An escaped ``<p>`` (optionally with a CSS class, e.g. ``note`` or ``warn``)."""
    c = f' class="{esc(cls)}"' if cls else ""
    return f"<p{c}>{esc(text)}</p>"


def pre(text: str) -> str:
    """An escaped ``<pre>`` block."""
    return f"<pre>{esc(text)}</pre>"


def details(summary: str, inner_html: str) -> str:
    """A collapsible ``<details>`` block."""
    return f"<details><summary>{esc(summary)}</summary>{inner_html}</details>"


def render_page(title: str, sections: Sequence[str]) -> str:
    """The whole HTML document: ``title`` and the concatenated, already-rendered ``sections``."""
    return PAGE.substitute(title=esc(title), body="\n".join(sections))
