"""Resume never loses or repeats work: broken ``latest``, missing trainer state, a truncated
checkpoint file, the execution log cut back, an edited config, a failed start, ``group_size < 2``.

The executor of these runs is the fakes' one wrapped to append every execution to the run's
``executions.sqlite``, as the real executors do, so duplicate steps there are visible.
"""
from __future__ import annotations

import json
import shutil
from collections import Counter

import pytest
import torch
from tests.support.fakes import FakeExecutor, FakePolicy, FakeScaffold, FakeWorldModel, fake_task

from wmrl.execution.log import ExecutionLog
from wmrl.training.config import ConfigError, load_config
from wmrl.runs.rundir import MANIFEST, RunDir, read_jsonl
from wmrl.training.components import Components, RunDirError
from wmrl.training.run import resume_training, run_training


class LoggingExecutor(FakeExecutor):
    """The fake executor, appending each execution to an execution log (opened lazily, like a run's)."""

    def __init__(self, path):
        super().__init__()
        self.path = path
        self.log = None

    def _run(self, req):
        r = super()._run(req)
        if self.log is None:
            self.log = ExecutionLog(self.path)
        self.log.append(req, r)
        return r

    def close(self):
        if self.log is not None:
            self.log.close()
            self.log = None


def comps(rd_root, method="wmrl") -> Components:
    ex = LoggingExecutor(rd_root / "executions.sqlite")
    return Components(train_tasks=[fake_task(i) for i in range(3)], heldout_tasks=[fake_task(9, "heldout")],
                      scaffold=FakeScaffold(), policy=FakePolicy(0), executor=ex,
                      world_model=None if method == "grpo" else FakeWorldModel(), close=ex.close)


def cfg_for(tmp_path, steps=5, *extra):
    return load_config(None, ["method=wmrl", f"run_dir={tmp_path / 'run'}", f"optim.steps={steps}",
                              "rollout.tasks_per_step=4", "rollout.group_size=4", "optim.lr=0.05",
                              "wmrl.routing.anchor_fraction=0.5", "wmrl.calibration.min_anchors=4", "progress=false",
                              "eval.every_k=2", "eval.samples_per_task=2", "keep_checkpoints=3", *extra])


def _stopped_run(tmp_path, stop=4):
    cfg = cfg_for(tmp_path)
    run_training(cfg, components=comps(tmp_path / "run"), stop_after_step=stop)
    return cfg, RunDir(cfg.run_dir)


def _exec_steps(rd):
    with ExecutionLog(rd.executions) as lg:
        return Counter((r["meta"].get("stream"), r["meta"].get("step"), r["request_id"]) for r in lg.records())


def _assert_no_duplicates(rd, steps):
    metrics = read_jsonl(rd.metrics)
    assert [m["step"] for m in metrics] == list(range(1, steps + 1))
    dup = {k: n for k, n in _exec_steps(rd).items() if n > 1}
    assert dup == {}, f"executions logged twice: {dup}"


def _reference(tmp_path):
    """The same run, uninterrupted: what a resumed one must equal."""
    cfg = cfg_for(tmp_path / "ref")
    c = comps(tmp_path / "ref" / "run")
    run_training(cfg, components=c)
    return RunDir(cfg.run_dir), c


def test_latest_naming_a_missing_folder_falls_back_and_repeats_nothing(tmp_path):
    cfg, rd = _stopped_run(tmp_path, stop=4)
    # a kill between steps leaves step 5's anchors in the log; then `latest` is broken by hand
    assert (rd.checkpoints / "latest").read_text().strip() == "step_000004"
    shutil.rmtree(rd.checkpoints / "step_000004")
    n_before = sum(_exec_steps(rd).values())
    c = comps(rd.root)
    s = resume_training(rd.root, components=c)
    assert s.steps == 5
    text = rd.log.read_text()
    assert "resuming from step_000003, the newest complete checkpoint, because checkpoints/latest names " \
           "step_000004: missing" in text
    _assert_no_duplicates(rd, 5)
    ref, rc = _reference(tmp_path)
    assert torch.equal(c.policy.theta.detach(), rc.policy.theta.detach())
    assert sorted(_exec_steps(rd)) == sorted(_exec_steps(ref))  # the same executions, each once
    assert n_before > 0
    led = json.loads(rd.ledger.read_text())
    assert led["groups"] == json.loads(ref.ledger.read_text())["groups"]


def test_missing_trainer_state_falls_back(tmp_path):
    cfg, rd = _stopped_run(tmp_path, stop=3)
    (rd.checkpoints / "step_000003" / "trainer_state.json").unlink()
    s = resume_training(rd.root, components=comps(rd.root))
    assert s.steps == 5
    assert "checkpoints/latest names step_000003: trainer_state.json is missing" in rd.log.read_text()
    _assert_no_duplicates(rd, 5)


def test_a_truncated_checkpoint_file_falls_back_to_the_previous_checkpoint(tmp_path):
    cfg, rd = _stopped_run(tmp_path, stop=3)
    opt = rd.checkpoints / "step_000003" / "optimizer.pt"
    data = opt.read_bytes()
    opt.write_bytes(data[: len(data) // 2])
    s = resume_training(rd.root, components=comps(rd.root))
    assert s.steps == 5
    assert f"optimizer.pt is {len(data) // 2} bytes, {len(data)} when written (truncated or damaged)" \
        in rd.log.read_text()
    _assert_no_duplicates(rd, 5)


def test_a_damaged_file_without_manifest_is_found_when_loading(tmp_path):
    """A checkpoint written before manifests existed: the failed load itself sends the resume back."""
    cfg, rd = _stopped_run(tmp_path, stop=3)
    ck = rd.checkpoints / "step_000003"
    (ck / MANIFEST).unlink()
    data = (ck / "rng.pt").read_bytes()
    (ck / "rng.pt").write_bytes(data[:100])
    s = resume_training(rd.root, components=comps(rd.root))
    assert s.steps == 5
    assert "resumed from step_000002 because step_000003 does not load" in rd.log.read_text()
    _assert_no_duplicates(rd, 5)


def test_no_usable_checkpoint_is_a_one_line_refusal(tmp_path):
    cfg, rd = _stopped_run(tmp_path, stop=2)
    for d in rd.checkpoints.glob("step_*"):
        (d / "trainer_state.json").unlink()
    with pytest.raises(RunDirError) as e:
        resume_training(rd.root, components=comps(rd.root))
    msg = str(e.value)
    assert "\n" not in msg and "has no complete checkpoint to resume from" in msg
    assert "checkpoints/latest names step_000002: trainer_state.json is missing" in msg
    assert "start a new run in another run_dir" in msg
    assert [m["step"] for m in read_jsonl(rd.metrics)] == [1, 2]  # nothing was touched


def test_an_edited_config_is_refused_unless_accepted(tmp_path):
    cfg, rd = _stopped_run(tmp_path, stop=2)
    text = rd.config.read_text()
    rd.config.write_text(text.replace("anchor_fraction: 0.5", "anchor_fraction: 0.25"))
    with pytest.raises(RunDirError, match=r"config.yaml was changed after the run saved it .*--accept-edited-config"):
        resume_training(rd.root, components=comps(rd.root))
    s = resume_training(rd.root, accept_edited_config=True, components=comps(rd.root))
    assert s.steps == 5
    assert "resumed with it (--accept-edited-config)" in rd.log.read_text()
    assert "anchor_fraction: 0.25" in rd.config.read_text()


def test_a_config_built_in_python_that_changes_the_past_is_refused(tmp_path):
    cfg, rd = _stopped_run(tmp_path, stop=2)
    other = cfg_for(tmp_path, 5, "optim.lr=0.5")
    with pytest.raises(ConfigError, match="differs from the run's saved config.yaml in optim.lr"):
        run_training(other, resume=True, components=comps(rd.root))


def test_a_failed_start_leaves_no_run_directory(tmp_path):
    cfg = cfg_for(tmp_path, 2, f"tasks.root={tmp_path / 'no-such-suite'}")
    with pytest.raises(Exception):  # noqa: B017 - the parts' error; what matters is what is left
        run_training(cfg)
    assert not (tmp_path / "run").exists()
    # the fix then starts normally (was: "already holds a run", and --resume refused the fix)
    s = run_training(cfg_for(tmp_path, 1, "eval.at_end=false", "eval.every_k=0"), components=comps(tmp_path / "run"))
    assert s.steps == 1


def test_a_start_failing_in_an_existing_folder_removes_only_what_it_added(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("the user's own file")

    class Boom(Exception):
        pass

    c = comps(tmp_path / "run")

    def fail(_d):
        raise Boom("disk full")

    c.policy.save = fail  # the step-0 checkpoint fails
    with pytest.raises(Boom):
        run_training(cfg_for(tmp_path, 1), components=c)
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["notes.txt"]


def test_group_size_below_two_is_refused():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["rollout.group_size=1"])
    assert str(e.value) == ("rollout.group_size: 1 trajectory per group cannot train: every method uses "
                            "group-relative advantages (reward minus the group's mean), which are all 0 with one "
                            "trajectory, so every update would be skipped; set rollout.group_size >= 2")
    assert load_config(None, ["rollout.group_size=2"]).rollout.group_size == 2


def test_the_cli_flag_goes_with_resume_only(tmp_path):
    import typer
    from typer.testing import CliRunner

    from wmrl.training import cli as train_cli

    app = typer.Typer()
    train_cli.register(app)
    r = CliRunner().invoke(app, ["train", "--accept-edited-config", "--set", "optim.steps=1"])
    assert r.exit_code == 2 and "--accept-edited-config goes with --resume RUN_DIR" in r.output
    cfg, rd = _stopped_run(tmp_path, stop=1)
    rd.config.write_text(rd.config.read_text().replace("lr: 0.05", "lr: 0.5"))
    r = CliRunner().invoke(app, ["train", "--resume", str(rd.root), "--no-progress"])
    assert r.exit_code == 2 and "was changed after the run saved it" in r.output


def test_a_resume_that_fails_while_building_leaves_a_finished_run_untouched(tmp_path):
    """Extending a finished run with an edited config that cannot build (found by a reviewer: it used to
    delete summary.json, cut eval.jsonl and re-hash the bad config before failing)."""
    cfg = cfg_for(tmp_path, 3)
    run_training(cfg, components=comps(tmp_path / "run"))
    rd = RunDir(cfg.run_dir)
    rd.config.write_text(rd.config.read_text().replace("max_new_tokens: 96", "max_new_tokens: 8"))
    from wmrl.runs.owner import OWNER_LOCK

    # the owner lock names whoever last held the folder (pid, start time), so a resume rewrites it
    skip = ("config.yaml", "train.log", "executions.sqlite", "executions.sqlite-wal", "executions.sqlite-shm",
            OWNER_LOCK)
    before = {p.name: p.read_bytes() for p in rd.root.iterdir() if p.is_file() and p.name not in skip}
    execs = _exec_steps(rd)

    class Boom(RuntimeError):
        pass

    def failing_build(*a, **k):
        raise Boom("rollout.max_new_tokens=8 is shorter than the longest program")

    import wmrl.training.run as run_mod  # the name run_training calls

    orig = run_mod.build_components
    run_mod.build_components = failing_build
    try:
        with pytest.raises(Boom):
            resume_training(rd.root, ["optim.steps=5"], accept_edited_config=True)
    finally:
        run_mod.build_components = orig
    after = {p.name: p.read_bytes() for p in rd.root.iterdir() if p.is_file() and p.name not in skip}
    assert _exec_steps(rd) == execs  # the execution log keeps every record (SQLite may checkpoint its WAL)
    # summary.json, eval.jsonl, metrics.jsonl, ledger.json, the config hash (train.log gets a line)
    assert after == before
    assert rd.config_edited()  # the bad edit is still flagged for the next resume


HOLDER = """
import sys, time
from wmrl.runs.owner import RunDirOwner
RunDirOwner(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(60)
"""


def test_a_run_directory_held_by_a_live_trainer_is_refused_until_it_dies(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    from wmrl.runs.owner import OWNER_LOCK

    cfg, rd = _stopped_run(tmp_path, stop=1)
    assert (rd.root / OWNER_LOCK).is_file()  # the stopped trainer's lock is free: it released it
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(rd.root)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout.readline().strip() == "held"
        before = rd.metrics.read_text()
        with pytest.raises(RunDirError) as e:
            resume_training(rd.root, components=comps(rd.root))
        msg = str(e.value)
        assert f"pid {child.pid} on host " in msg and "since " in msg and "--resume" in msg, msg
        with pytest.raises(RunDirError, match=f"pid {child.pid}"):  # a start there too
            run_training(cfg_for(tmp_path), components=comps(rd.root))
        assert rd.metrics.read_text() == before  # nothing was touched
    finally:
        child.kill()
        child.wait()
    s = resume_training(rd.root, components=comps(rd.root))  # the dead owner's lock is taken over
    assert s.steps == 5
    assert f'"pid": {os.getpid()}' in (rd.root / OWNER_LOCK).read_text()


def test_the_cli_message_is_one_line_in_a_pipe_whatever_the_path_length(tmp_path):
    """Piped output is not wrapped at 80 columns: the whole message, path included, is on one line for a
    200-character run directory path and a short one alike."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    long_base = tmp_path / ("p" * max(1, 200 - len(str(tmp_path)) - len("/run") - 1))
    long_base.mkdir()
    for base in (long_base, tmp_path / "s"):
        base.mkdir(exist_ok=True)
        _cfg, rd = _stopped_run(base, stop=1)
        rd.config.write_text(rd.config.read_text().replace("lr: 0.05", "lr: 0.5"))
        r = subprocess.run([sys.executable, "-m", "wmrl.cli", "train", "--resume", str(rd.root), "--no-progress"],
                           capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(root), COLUMNS="80"),
                           timeout=120)
        assert r.returncode == 2, r.stderr
        lines = [ln for ln in (r.stdout + r.stderr).splitlines() if "was changed after the run saved it" in ln]
        assert len(lines) == 1, r.stderr
        assert str(rd.config) in lines[0], lines
        assert lines[0].rstrip().endswith("--accept-edited-config to use the edited file"), lines
