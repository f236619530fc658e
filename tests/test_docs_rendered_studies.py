"""The studies' figures in docs/*.md are rendered from committed study files (studies/render_docs.py: ``table``,
``cell``, ``json``), and every "Measured" section either holds a rendered region or says that it is not rendered
from a committed file."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.support.render_docs import load_render_docs

ROOT = Path(__file__).resolve().parents[1]
NOT_RENDERED = "Not rendered from a committed file"


def _measured_sections(text: str) -> list[tuple[str, str]]:
    """(heading, body up to the next heading of the same or a higher level) of every heading that says measured."""
    heads = list(re.finditer(r"^(#+) (.*)$", text, re.M))
    out = []
    for i, h in enumerate(heads):
        if not re.search(r"\bmeasured\b", h.group(2), re.I):
            continue
        end = next((h2.start() for h2 in heads[i + 1:] if len(h2.group(1)) <= len(h.group(1))), len(text))
        out.append((h.group(2), text[h.end():end]))
    return out


def test_every_measured_section_is_rendered_or_says_it_is_not():
    rd = load_render_docs()
    bare = [f"{p.relative_to(ROOT)}: {head}" for p in rd.pages()
            for head, body in _measured_sections(p.read_text(encoding="utf-8"))
            if "<!-- rendered:" not in body and NOT_RENDERED not in body]
    assert not bare, "measured sections with neither a rendered region nor the note: " + "; ".join(bare)


def _copy(tmp_path: Path, page: str, *files: str) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("", encoding="utf-8")
    shutil.copy(ROOT / page, tmp_path / page)
    for f in files:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / f, tmp_path / f)
    return tmp_path / page


def test_a_changed_cell_of_a_study_table_makes_the_page_stale(tmp_path):
    rd = load_render_docs()
    page = _copy(tmp_path, "docs/scaling.md", *sorted(
        str(p.relative_to(ROOT)) for d in ("studies/scaling", "studies/simulation/staleness",
                                           "studies/simulation/async", "studies/simulation/async-other")
        for p in (ROOT / d).glob("*.md")))
    assert rd.stale_pages(tmp_path) == []
    results = tmp_path / "studies" / "scaling" / "results_local.md"
    text = results.read_text(encoding="utf-8")
    assert "| 15.74x |" in text
    results.write_text(text.replace("| 15.74x |", "| 15.75x |"), encoding="utf-8")
    assert rd.stale_pages(tmp_path) == [page]


def test_a_changed_value_of_a_study_json_makes_the_page_stale(tmp_path):
    rd = load_render_docs()
    files = ["studies/models/fidelity-regression.json", "studies/models/fidelity-generative.json"]
    others = ["studies/benchmark/cpu-small-rerun/reorder_probe.md", "studies/benchmark/cpu-small-fine/reorder_probe.md",
              "studies/benchmark/cpu-small-neighbours/exploit_probe.md"]
    others += [f"studies/benchmark/{b}/results.csv" for b in
               ("cpu-small-rerun", "cpu-small-neighbours", "cpu-small-neighbours-own")]
    page = _copy(tmp_path, "docs/models.md", *files, *others)
    assert rd.stale_pages(tmp_path) == []
    card = tmp_path / files[0]
    data = json.loads(card.read_text(encoding="utf-8"))
    data["figures"]["pairwise_acc"]["value"] += 0.01
    card.write_text(json.dumps(data), encoding="utf-8")
    assert rd.stale_pages(tmp_path) == [page]


@pytest.mark.parametrize(("directive", "says"), [
    ("table studies/simulation/summary.md n=99", "not a table number 99"),
    ('table studies/simulation/summary.md "columns=no such column"', "no column 'no such column'"),
    ("table studies/simulation/summary.md n=3 where=error:nothing", "no row of"),
    ("cell studies/simulation/summary.md n=3 where=error:exploit columns=wmrl", "not one cell"),
    ("json studies/models/fidelity-regression.json figures/nothing", "nothing at 'nothing'"),
    ("json studies/models/fidelity-regression.json status_available", "not a number"),
    ("json studies/models/fidelity-regression.json", "wrong arguments"),
    ("table studies/no-such-file.md", "does not exist"),
])
def test_a_directive_that_cannot_be_read_is_one_clear_error(directive, says):
    rd = load_render_docs()
    with pytest.raises(rd.RenderError, match=re.escape(says)):
        rd.Renderer().render(directive)


def test_table_and_cell_read_what_the_file_holds(tmp_path):
    rd = load_render_docs()
    (tmp_path / "t.md").write_text("text\n\n| a | b \\| c | d |\n|---|---|---|\n| x | **1** | `p` |\n"
                                   "| y | 2 | q |\n\nmore\n\n| e |\n|---|\n| 3 |\n", encoding="utf-8")
    (tmp_path / "v.json").write_text(json.dumps({"rows": [{"k": 1, "v": 0.25}, {"k": 2, "v": {
        "value": 0.5, "lo": 0.25, "hi": 0.75}}]}), encoding="utf-8")
    r = rd.Renderer(tmp_path)
    assert r.render('table t.md "columns=d;a" where=a:y') == "\n| d | a |\n|---|---|\n| q | y |\n"
    assert r.render("cell t.md where=a:x columns=d") == "p"
    assert r.render('cell t.md where=a:x "columns=b \\| c"') == "1"
    assert r.render("table t.md n=2") == "\n| e |\n|---|\n| 3 |\n"
    assert r.render("json v.json rows/k=1/v scale=100 digits=1") == "25.0"
    assert r.render("json v.json rows/1/v ci=yes digits=2") == "0.50 [0.25, 0.75]"
