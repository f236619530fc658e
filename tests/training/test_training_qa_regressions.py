"""Regressions for QA reports on the trainer: config ranges and non-finite numbers, clear errors for a
config folder or broken YAML, the warm-up failure message, tasks without a leaderboard."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from tests.support.fakes import fake_task
from typer.testing import CliRunner

from wmrl.cli import app
from wmrl.training import parts
from wmrl.training.config import ConfigError, OptimConfig, TrainConfig, describe_fields, load_config
from wmrl.runs.ledger import Ledger
from wmrl.runs.rundir import RunDir
from wmrl.training.run import run_training

runner = CliRunner()


def _flat(text: str) -> str:
    return " ".join(text.split())


# --- bug a: non-finite and out-of-range numbers are refused, naming the key and the range -------------

@pytest.mark.parametrize("override, words", [
    ("optim.lr=inf", ["optim.lr", "inf", "finite", "> 0.0"]),
    ("optim.lr=nan", ["optim.lr", "nan", "finite", "> 0.0"]),
    ("optim.lr=-1e-5", ["optim.lr", "minimum", "> 0.0"]),
    ("optim.lr=0", ["optim.lr", "minimum", "> 0.0"]),
    ("optim.lr=-inf", ["optim.lr", "finite"]),
    ("optim.clip_high=-0.1", ["optim.clip_high", "minimum", ">= 0.0"]),
    ("optim.clip_low=1.5", ["optim.clip_low", "maximum", "0.0 .. 1.0"]),
    ("optim.beta=-1", ["optim.beta", "minimum", ">= 0.0"]),
    ("optim.beta=inf", ["optim.beta", "finite", ">= 0.0"]),
    ("optim.grad_clip=nan", ["optim.grad_clip", "finite"]),
    ("wmrl.routing.anchor_fraction=-0.1", ["wmrl.routing.anchor_fraction", "minimum", "0.0 .. 1.0"]),
    ("wmrl.routing.anchor_fraction=nan", ["wmrl.routing.anchor_fraction", "finite", "0.0 .. 1.0"]),
    ("wmrl.fusion.alpha_floor=nan", ["wmrl.fusion.alpha_floor", "finite"]),
    ("world_model.heldout_fraction=inf", ["world_model.heldout_fraction", "finite", "0.0 .. 0.9"]),
    ("world_model.fit_lr=0", ["world_model.fit_lr", "> 0.0"]),
    ("world_model.head_lr=nan", ["world_model.head_lr", "finite"]),
    ("world_model.fit_time_budget_s=inf", ["world_model.fit_time_budget_s", "finite"]),
    ("executor.time_limit_s=nan", ["executor.time_limit_s", "finite"]),
    ("rollout.temperature=inf", ["rollout.temperature", "finite"]),
    ("seed=-1", ["seed", "minimum", "0 .. 4294967295"]),
])
def test_non_finite_and_out_of_range_values_are_refused(override, words):
    with pytest.raises(ConfigError) as e:
        load_config(None, [override])
    for w in words:
        assert w in str(e.value), str(e.value)


def test_non_finite_yaml_values_are_refused(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("optim:\n  lr: .inf\n")
    with pytest.raises(ConfigError, match=r"optim\.lr.*finite"):
        load_config(p)
    p.write_text("wmrl:\n  fusion:\n    alpha_ceiling: .nan\n")
    with pytest.raises(ConfigError, match=r"wmrl\.fusion\.alpha_ceiling.*finite"):
        load_config(p)


def test_valid_edges_still_load():
    cfg = load_config(None, ["optim.lr=1e-9", "optim.clip_high=0", "optim.beta=0", "wmrl.routing.anchor_fraction=1",
                             "world_model.heldout_fraction=0", "seed=0"])
    assert cfg.optim.lr == 1e-9 and cfg.wmrl.routing.anchor_fraction == 1.0


def test_run_training_refuses_a_bad_config_built_in_python(tmp_path):
    cfg = TrainConfig(run_dir=str(tmp_path / "run"), optim=OptimConfig(lr=float("inf")))
    with pytest.raises(ConfigError, match=r"optim\.lr"):
        run_training(cfg)
    assert not (tmp_path / "run").exists()


def test_config_show_prints_the_open_range_of_lr():
    rows = {k: h for k, _t, _v, h in describe_fields()}
    assert "[range: > 0.0]" in rows["optim.lr"]
    assert "[range: 0.0 .. 1.0]" in rows["wmrl.routing.anchor_fraction"]


def test_cli_refuses_lr_inf_before_starting(tmp_path):
    r = runner.invoke(app, ["train", "--set", "optim.lr=inf", "--set", f"run_dir={tmp_path / 'run'}"])
    assert r.exit_code == 2
    out = _flat(r.output)
    assert "error:" in out and "optim.lr" in out and "finite" in out
    assert not (tmp_path / "run").exists()


# --- bug b: a folder, broken YAML -----------------------------------------------------------------------

def test_config_folder_is_named_a_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cfgs").mkdir()
    r = runner.invoke(app, ["train", "--config", "cfgs"])
    assert r.exit_code == 2
    out = _flat(r.output)
    assert "error:" in out and "is a folder, not a YAML file" in out and "not found" not in out
    with pytest.raises(ConfigError, match="is a folder"):
        load_config(tmp_path / "cfgs")
    r = runner.invoke(app, ["config", "show", "--config", "cfgs"])
    assert r.exit_code == 2 and "is a folder" in _flat(r.output)


def test_broken_yaml_says_file_line_and_column(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("broken.yaml").write_text("optim:\n  lr: [1, 2\nmethod: wmrl\n")
    r = runner.invoke(app, ["train", "--config", "broken.yaml"])
    assert r.exit_code == 2
    out = _flat(r.output)
    assert "error: cannot parse broken.yaml as YAML: line 3, column 7:" in out, out
    assert "<unicode string>" not in out
    Path("broken.yaml").write_text("a: b: c\n")
    with pytest.raises(ConfigError, match=r"cannot parse .*broken\.yaml as YAML: line 1, column 5: mapping values"):
        load_config("broken.yaml")
    Path("binary.yaml").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match="cannot parse .*binary.yaml as YAML"):
        load_config("binary.yaml")


def test_error_messages_are_printed_literally(tmp_path, monkeypatch):
    """A message holding rich-markup-like text ([bold], [/x]) is printed as is."""
    monkeypatch.chdir(tmp_path)
    Path("c.yaml").write_text("name: x\n'[/bold]': 1\n")
    r = runner.invoke(app, ["train", "--config", "c.yaml"])
    assert r.exit_code == 2 and "[/bold]" in r.output, r.output


# --- bug c: every warm-up execution an infra_error --------------------------------------------------------

def _rec(status: str, error: str = "", reward: float | None = None) -> dict:
    return {"task_id": "t", "status": status, "reward": reward, "error": error, "meta": {"prompt": "p"}}


def test_warmup_failure_shows_the_executions_errors_and_counts(tmp_path, monkeypatch):
    records = ([_rec("infra_error", "bwrap: setting up uid map: Permission denied")] * 3
               + [_rec("infra_error", "executor failed: OSError: no space left")]
               + [_rec("infra_error", "a third error, not shown")])
    monkeypatch.setattr(parts, "warmup_records", lambda *a, **k: records)
    rd = RunDir(tmp_path / "run")
    rd.create()
    cfg = load_config(None, [f"run_dir={rd.root}"])
    with pytest.raises(RuntimeError) as e:
        parts._world_model(cfg, rd, Ledger(method="wmrl"), None, None, None, None, [fake_task(0)], None)
    msg = str(e.value)
    assert "0 executions with a reward (of 5" in msg
    assert "infra_error 5" in msg
    assert "bwrap: setting up uid map: Permission denied" in msg and "no space left" in msg
    assert "a third error" not in msg
    assert "leaderboard" not in msg
    assert str(rd.executions) in msg


def test_warmup_failure_counts_every_status_and_points_at_rewardless_ok():
    msg = parts.warmup_failure_message([_rec("ok"), _rec("ok"), _rec("infra_error", "x"), _rec("crash", reward=0.0)],
                                       1, Path("/r/executions.sqlite"))
    assert "ok 2, crash 1, infra_error 1" in msg
    assert "2 ok executions have no reward" in msg and "leaderboards" in msg


# --- bug d: tasks without a leaderboard are refused up front -----------------------------------------------

class _Suite:
    def __init__(self, tasks):
        self._t = {t.id: t for t in tasks}

    def get(self, i):
        return self._t[i]

    def tasks(self, split=None):
        return [t for t in self._t.values() if split is None or t.split == split]


def _with_board(t):
    return dataclasses.replace(t, leaderboard_paths=(Path("/nonexistent/board.csv"),))


def test_tasks_without_leaderboard_are_refused(monkeypatch):
    good = [_with_board(fake_task(0)), _with_board(fake_task(9, "heldout"))]
    suite = _Suite([*good, fake_task(1), fake_task(8, "heldout")])
    monkeypatch.setattr(parts, "TaskSuite", lambda root: suite)  # the name resolve_tasks reads
    import wmrl.tasks.checks as checks  # fake tasks have no answers on disk: only the boards are checked here

    monkeypatch.setattr(checks, "check_task", lambda task, view_fraction=None: [])
    cfg = load_config(None, ["tasks.root=/x", "tasks.train=[task0, task1]", "tasks.heldout=[task9]"])
    with pytest.raises(ConfigError) as e:
        parts.resolve_tasks(cfg)
    assert "tasks.train" in str(e.value) and "task1" in str(e.value) and "no leaderboard" in str(e.value)
    assert "task0" not in str(e.value)
    cfg = load_config(None, ["tasks.root=/x", "tasks.train=[task0]", "tasks.heldout=[task8, task9]"])
    with pytest.raises(ConfigError, match=r"tasks\.heldout.*task8.*no leaderboard"):
        parts.resolve_tasks(cfg)
    cfg = load_config(None, ["tasks.root=/x", "tasks.train=[task0]", "tasks.heldout=[task9]"])
    train, held = parts.resolve_tasks(cfg)
    assert [t.id for t in train] == ["task0"] and [t.id for t in held] == ["task9"]
    with pytest.raises(ConfigError, match=r"--tasks.*task1"):
        parts.require_leaderboards([fake_task(1)], "--tasks")


# --- an executor future that raises is an infrastructure failure (dropped, counted), not a crash -----------

@pytest.mark.parametrize("failure", ["raise", "cancel"])
def test_a_raising_or_cancelled_executor_future_counts_as_infra_error(tmp_path, failure):
    from concurrent.futures import Future

    from tests.support.fakes import FakeExecutor, FakePolicy, FakeScaffold

    from wmrl.runs.rundir import read_jsonl
    from wmrl.training.components import Components

    class Raising(FakeExecutor):
        def submit(self, req):
            f = super().submit(req)
            if self.n % 3 == 1:
                f = Future()
                if failure == "raise":
                    f.set_exception(RuntimeError("worker died"))
                else:
                    assert f.cancel()  # e.g. the executor was closed under the trainer
            return f

    comps = Components(train_tasks=[fake_task(i) for i in range(3)], heldout_tasks=[], scaffold=FakeScaffold(),
                       policy=FakePolicy(0), executor=Raising())
    cfg = load_config(None, ["method=grpo", f"run_dir={tmp_path / 'run'}", "optim.steps=2", "progress=false",
                             "rollout.tasks_per_step=2", "rollout.group_size=3", "eval.at_end=false"])
    run_training(cfg, components=comps)
    m = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    s = read_jsonl(tmp_path / "run" / "samples.jsonl")
    n_bad = sum(r["n_infra_errors"] for r in m)
    assert n_bad == 4 == sum(r["status"] == "infra_error" and r["dropped"] and r["weight"] == 0 for r in s)
    assert m[-1]["n_infra_errors_total"] == n_bad
    errors = [r.get("error") or "" for r in s if r["status"] == "infra_error"]
    want = "worker died" if failure == "raise" else "cancelled"
    assert errors and all(want in e for e in errors), errors
