"""`wmrl eval --protocol paper` over the 14 competitions' folders with synthetic answers, end to end, at small
settings: an MLE-Dojo checkout whose 14 competitions carry the paper's ids (each with the fixture's metric code and
boards) is built by the coverage run's builder (`benchmarks/e2e_coverage.py --protocol paper`), then the tiny
model's initial policy is evaluated over the folders with 1 sample of 1 turn per task; both overall means are
printed and equal what the per-task rows give."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from wmrl.cli import app
from wmrl.runs.rundir import RunDir, read_jsonl
from wmrl.training.config import load_config, save_config
from wmrl.training.protocol import PAPER

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
SMALL = ["--override", "samples_per_task=1", "--override", "max_turns=1", "--override", "max_new_tokens=64",
         "--override", "time_limit_s=60"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from wmrl.tasks.fixtures import build_benchmark_fixtures

    base = tmp_path_factory.mktemp("paper")
    build_benchmark_fixtures(base / "fx", ("mledojo",), ids=("dojo-titanicp",))
    src = base / "fx" / "mle-dojo" / "mledojo" / "competitions" / "dojo-titanicp"
    checkout = base / "MLE-Dojo"
    for tid in PAPER.split or []:
        shutil.copytree(src, checkout / "mledojo" / "competitions" / tid)
    out = base / "synthetic"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "e2e_coverage.py"), str(checkout), "--bench",
                        "mledojo", "--out", str(out), "--protocol", "paper"], capture_output=True, text=True, env=env,
                       timeout=900)
    assert r.returncode == 0, r.stderr
    assert "protocol paper: 14 of its 14 competitions built with synthetic answers and graded exactly" in r.stdout
    (line,) = [ln for ln in r.stdout.splitlines() if ln.startswith("evaluate: ")]
    roots = re.findall(r"--root (\S+)", line)
    assert roots == [str(out / "data" / "mle-dojo-data"), str(checkout)] and "--allow-missing" not in line
    run = base / "run"
    run.mkdir()
    # A run directory as `wmrl train` leaves its config; `--checkpoint initial` rebuilds the tiny policy from it.
    cfg = load_config(ROOT / "configs" / "tiny.yaml", [f"tasks.root={roots[0]}", f"run_dir={run}",
                                                       "tasks.train=[GiveMeSomeCredit]"])
    save_config(cfg, RunDir(run).config)
    return run, roots


def _rows(text: str) -> dict[str, tuple[str, float]]:
    """The per-task table's rows: ``{task: (category, avg@1 %)}``."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if len(cells) == 5 and cells[0] in (PAPER.split or []):
            rows[cells[0]] = (cells[1], float(cells[2]))
    return rows


def test_the_paper_protocol_runs_over_the_14_and_prints_both_means(built, monkeypatch):
    run, roots = built
    monkeypatch.setenv("WMRL_HOME", str(run.parent / "home"))
    monkeypatch.setenv("COLUMNS", "200")
    args = ["eval", str(run), "--checkpoint", "initial", "--protocol", "paper",
            *(x for r in roots for x in ("--root", r)), *SMALL]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    out = r.output
    assert "category means (%) over 14 of its 14 competitions, NOT COMPARABLE" in out
    assert "settings changed from the protocol's: samples_per_task 8 -> 1, max_turns 4 -> 1" in " ".join(out.split())
    rows = _rows(out)
    assert list(rows) == list(PAPER.split or [])
    assert {t: c for t, (c, _) in rows.items()} == PAPER.categories
    cats = {c: [v for t, (cc, v) in rows.items() if cc == c] for c in ("tabular", "text", "image")}
    by_cat = sum(sum(v) / len(v) for v in cats.values()) / 3
    by_task = sum(v for _, v in rows.values()) / 14
    avg = float(re.search(r"Avg \(mean over categories\) = overall\s*│\s*14\s*│\s*([\d.]+)", out).group(1))
    task_mean = float(re.search(r"mean over tasks\s*│\s*14\s*│\s*([\d.]+)", out).group(1))
    assert avg == pytest.approx(by_cat, abs=0.1) and task_mean == pytest.approx(by_task, abs=0.1)
    # the record holds the same numbers unrounded
    (rec,) = read_jsonl(run / "eval_cli.jsonl")
    res = rec["protocol_result"]
    pt = res["per_task"]
    assert res["k"] == 1 and res["n_tasks"] == res["n_split"] == 14 and res["missing"] == []
    assert {t: round(100 * v["avg_at_k"], 1) for t, v in pt.items()} == {t: v for t, (_, v) in rows.items()}
    means = [sum(pt[t]["avg_at_k"] for t in ts) / len(ts)
             for ts in ([t for t in pt if pt[t]["category"] == c] for c in ("tabular", "text", "image"))]
    assert res["category_mean"] == pytest.approx(sum(means) / 3)
    assert res["task_mean"] == pytest.approx(sum(v["avg_at_k"] for v in pt.values()) / 14)
    assert res["overall"] == res["category_mean"] and not res["comparable"]


def test_an_override_outside_the_sampling_settings_is_refused_in_one_line(built):
    run, roots = built
    r = CliRunner().invoke(app, ["eval", str(run), "--checkpoint", "initial", "--protocol", "paper",
                                 "--root", roots[0], "--override", "split=[a]"])
    assert r.exit_code == 2 and "'split' cannot be overridden" in " ".join(r.output.split())
    assert "Traceback" not in r.output
