"""A root where some competitions are broken beside good ones: every command lists, checks and grades the good
ones, each broken one is refused in one line naming its real cause, and nothing prints a traceback."""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from wmrl.cli import app
from wmrl.tasks.fixtures import build_benchmark_fixtures
from wmrl.tasks.loader import discover

GOOD = ("mleb-attrition", "mleb-seattle-weather")


def _clone(root: Path, src: str, new: str) -> tuple[Path, Path]:
    """Copy competition ``src`` (package metadata and prepared data) to ``new``; returns (metadata, data) folders."""
    pkg = root / "mle-bench" / "mlebench" / "competitions"
    data = root / "mle-bench-data"
    shutil.copytree(pkg / src, pkg / new)
    shutil.copytree(data / src, data / new)
    cfg = yaml.safe_load((pkg / new / "config.yaml").read_text())
    cfg["id"] = new
    (pkg / new / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return pkg / new, data / new


@pytest.fixture(scope="module")
def broken_root(tmp_path_factory) -> Path:
    """Two good MLE-bench competitions and one of each failure kind a competition can bring."""
    root = tmp_path_factory.mktemp("broken")
    build_benchmark_fixtures(root, ("mlebench",))
    # 1. grade.py imports a module that is not installed, and the metric is the code's only (no grader name).
    meta, _ = _clone(root, "mleb-attrition", "bad-missing-module")
    cfg = yaml.safe_load((meta / "config.yaml").read_text())
    cfg["grader"]["name"] = "custom"
    (meta / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    (meta / "grade.py").write_text("import wmrl_no_such_module_abc\n\n\ndef grade(submission, answers):\n"
                                   "    return 0.5\n")
    # 2. the same with a grader name wmrl knows: the code is still the authority (the fast-path decision runs it).
    meta, _ = _clone(root, "mleb-attrition", "bad-missing-module-named")
    (meta / "grade.py").write_text("import wmrl_no_such_module_def\n\n\ndef grade(submission, answers):\n"
                                   "    return 0.5\n")
    # 3. grade.py raises a plain exception when it is imported.
    meta, _ = _clone(root, "mleb-attrition", "bad-import-raises")
    (meta / "grade.py").write_text("raise RuntimeError('grading tables not configured')\n")
    # 4. config.yaml of the wrong shape (grader is a string, not a mapping).
    meta, _ = _clone(root, "mleb-attrition", "bad-config-shape")
    cfg = yaml.safe_load((meta / "config.yaml").read_text())
    cfg["grader"] = "auc-roc"
    (meta / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    # 5. an unreadable leaderboard (binary bytes).
    meta, _ = _clone(root, "mleb-attrition", "bad-leaderboard")
    (meta / "leaderboard.csv").write_bytes(b"\x00\x01\x02score\n\xff\xfe")
    # 6. answers that are a folder, not a file.
    _, data = _clone(root, "mleb-attrition", "bad-answers-folder")
    (data / "prepared" / "private" / "test.csv").unlink()
    (data / "prepared" / "private" / "test.csv").mkdir()
    return root


BROKEN = {"bad-missing-module": "wmrl_no_such_module_abc", "bad-missing-module-named": "wmrl_no_such_module_def",
          "bad-import-raises": "grading tables not configured", "bad-config-shape": "grader",
          "bad-leaderboard": "leaderboard", "bad-answers-folder": "no answers CSV"}


def _flat(text: str) -> str:
    return " ".join(text.split())


def _no_crash(r) -> None:
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert "Traceback" not in r.output


def test_discover_refuses_each_broken_competition_with_its_cause(broken_root):
    disc = discover([broken_root])
    assert sorted(disc.tasks) == sorted(GOOD)
    refused = {tid: why for tid, _, why in disc.refused}
    assert sorted(refused) == sorted(BROKEN)
    for tid, cause in BROKEN.items():
        assert cause in refused[tid], (tid, refused[tid])
        assert "\n" not in refused[tid] and "Traceback" not in refused[tid]


def test_list_check_and_grade_handle_the_good_ones(broken_root, tmp_path):
    runner = CliRunner()
    r = runner.invoke(app, ["tasks", "list", "--root", str(broken_root)])
    _no_crash(r)
    out = _flat(r.output)
    assert r.exit_code == 1
    for tid in GOOD:
        assert tid in out
    for tid, cause in BROKEN.items():
        assert f"refused {tid}:" in out and cause in out
    r = runner.invoke(app, ["tasks", "check", "--root", str(broken_root), "--allow-refused"])
    _no_crash(r)
    assert r.exit_code == 0, r.output
    for tid in GOOD:
        assert f"{tid}: ok" in _flat(r.output)
    answers = pd.read_csv(broken_root / "mle-bench-data" / "mleb-attrition" / "prepared" / "private" / "test.csv")
    sub = tmp_path / "sub.csv"
    answers.assign(**{answers.columns[1]: 0.5}).to_csv(sub, index=False)
    r = runner.invoke(app, ["tasks", "grade", "mleb-attrition", str(sub), "--root", str(broken_root)])
    _no_crash(r)
    assert r.exit_code == 0, r.output
    assert "task mleb-attrition:" in r.output
    r = runner.invoke(app, ["tasks", "grade", "bad-missing-module", str(sub), "--root", str(broken_root)])
    _no_crash(r)
    assert r.exit_code != 0 and "wmrl_no_such_module_abc" in _flat(r.output)


def test_grade_by_id_loads_only_that_task(broken_root, tmp_path, monkeypatch):
    import wmrl.tasks.loader as loader

    loaded: list[str] = []
    real = loader.load_task

    def spy(path, **kw):
        loaded.append(Path(path).name)
        return real(path, **kw)

    monkeypatch.setattr(loader, "load_task", spy)
    answers = pd.read_csv(broken_root / "mle-bench-data" / "mleb-attrition" / "prepared" / "private" / "test.csv")
    sub = tmp_path / "sub.csv"
    answers.assign(**{answers.columns[1]: 0.5}).to_csv(sub, index=False)
    r = CliRunner().invoke(app, ["tasks", "grade", "mleb-attrition", str(sub), "--root", str(broken_root)])
    _no_crash(r)
    assert r.exit_code == 0, r.output
    assert loaded == ["mleb-attrition"]


def test_grade_of_a_data_folder_path_finds_its_metadata_under_root(broken_root, tmp_path):
    # the prepared data alone, away from the checkout: its config.yaml lies only under the root given
    data = tmp_path / "elsewhere" / "mleb-attrition"
    shutil.copytree(broken_root / "mle-bench-data" / "mleb-attrition", data)
    answers = pd.read_csv(data / "prepared" / "private" / "test.csv")
    sub = tmp_path / "sub.csv"
    answers.assign(**{answers.columns[1]: 0.5}).to_csv(sub, index=False)
    r = CliRunner().invoke(app, ["tasks", "grade", str(data), str(sub), "--root", str(broken_root / "mle-bench")])
    _no_crash(r)
    assert r.exit_code == 0, r.output
    assert "task mleb-attrition:" in r.output


def test_serve_sandbox_takes_root():
    import typer.main

    serve = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]
    opts = {o for p in serve.commands["sandbox"].params for o in p.opts}
    assert {"--root", "--tasks-root"} <= opts
