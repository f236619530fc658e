"""The README's Python example runs and prints what the README says it prints.

The example is the first ```python block after the heading "## Python" of README.md; the output it claims is the
first ```text block after it. Both are read from the file, so an edit of the README that breaks the example or
changes its output fails here.
"""
from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parents[1] / "README.md"


def _block(text: str, lang: str, start: int) -> tuple[str, int]:
    """The body of the first fenced block of ``lang`` at or after ``start``, and the offset after it."""
    m = re.compile(rf"^```{lang}\n(.*?)^```", re.S | re.M).search(text, start)
    assert m, f"README.md has no ```{lang} block after offset {start}"
    return m.group(1), m.end()


def _example() -> tuple[str, str]:
    text = README.read_text(encoding="utf-8")
    heading = re.search(r"^## Python\s*$", text, re.M)
    assert heading, "README.md has no '## Python' heading"
    code, end = _block(text, "python", heading.end())
    output, _ = _block(text, "text", end)
    return code, output


def _lines(s: str) -> list[str]:
    return [" ".join(line.split()) for line in s.strip().splitlines()]


def test_readme_python_example_prints_what_the_readme_shows():
    code, claimed = _example()
    ns: dict = {"__name__": "readme_example"}
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(code, "README.md:python", "exec"), ns)  # noqa: S102 - the documentation's example, run as written
    assert _lines(buf.getvalue()) == _lines(claimed)
    out = ns["out"]  # the last step's StepOutputs
    # the fused weights are a distribution over the step's samples: alpha on the anchors, 1 - alpha on the rest
    assert np.isclose(out.weights.sum(), 1.0)
    anchor = ns["anchor"]
    assert np.isclose(out.weights[anchor].sum(), out.stats["alpha"])
    assert np.all(np.isfinite(out.advantages))
