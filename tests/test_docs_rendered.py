"""The run figures of README.md and docs/*.md are rendered from the committed results (studies/render_docs.py):
the pages in the repository equal a fresh rendering, and a changed results file makes them differ."""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

from tests.support.render_docs import load_render_docs

ROOT = Path(__file__).resolve().parents[1]


def test_every_page_equals_its_rendering_from_the_committed_results():
    rd = load_render_docs()
    regions = sum(len(rd.REGION.findall(p.read_text(encoding="utf-8"))) for p in rd.pages())
    stale = rd.stale_pages()
    assert regions > 20 and not stale, (
        f"{', '.join(str(p.relative_to(ROOT)) for p in stale)} differ from the committed results: "
        "run `python studies/render_docs.py` and commit the pages")


def test_one_changed_value_in_a_results_file_makes_the_check_fail(tmp_path):
    rd = load_render_docs()
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    (tmp_path / "docs").mkdir()
    shutil.copytree(ROOT / "studies" / "benchmark", tmp_path / "studies" / "benchmark",
                    ignore=shutil.ignore_patterns("seed*", "corpus", "*.png", "*.html"))
    shutil.copytree(ROOT / "studies" / "quickstart", tmp_path / "studies" / "quickstart")  # the README's main job
    assert rd.stale_pages(tmp_path) == []
    results = tmp_path / "studies" / "benchmark" / "results.csv"
    df = pd.read_csv(results)
    row = df.index[(df["method"] == "wmrl") & (df["seed"] == 0)][0]
    df.loc[row, "train_percentile"] += 0.1
    df.to_csv(results, index=False)
    rd._results.cache_clear()
    assert rd.stale_pages(tmp_path) == [tmp_path / "README.md"]
