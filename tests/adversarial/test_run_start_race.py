"""Two trainers starting in one new run directory, and a trainer killed at each phase of its start: a run folder is
removed only by the process that made it, and is never left half-deleted.

The trainers run on the fakes of tests/support/fakes.py (a categorical policy, a deterministic executor), so a
whole run takes about a second; the second trainer and the killed ones are subprocesses (a SIGKILL needs a process
of its own). Nothing here waits on a clock: each side waits for the other's line on a pipe.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wmrl.runs.owner import OWNER_LOCK
from wmrl.runs.rundir import RunDir, read_jsonl
from wmrl.training.components import RunDirError
from wmrl.training.run import resume_training, run_training

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))
STEPS = 2

#: Builds the fake parts and the config of a run in ``RUN`` (the same in this process and in the subprocesses).
SETUP = """
from tests.support.fakes import FakeExecutor, FakePolicy, FakeScaffold, FakeWorldModel, fake_task
from wmrl.training.components import Components
from wmrl.training.config import load_config

def comps():
    return Components(train_tasks=[fake_task(i) for i in range(3)], heldout_tasks=[fake_task(9, "heldout")],
                      scaffold=FakeScaffold(), policy=FakePolicy(0), executor=FakeExecutor(),
                      world_model=FakeWorldModel())

def cfg(run, steps):
    return load_config(None, ["method=wmrl", f"run_dir={run}", f"optim.steps={steps}", "rollout.tasks_per_step=2",
                              "rollout.group_size=2", "wmrl.routing.anchor_fraction=0.5",
                              "wmrl.calibration.min_anchors=2",
                              "progress=false", "eval.every_k=0", "eval.samples_per_task=1", "seed=3"])
"""

#: The winner: a trainer that starts in argv[1], says "held" once its step-0 checkpoint is written (the lock held
#: all along), waits for a line on stdin, then trains to the end.
WINNER = SETUP + """
import sys
import wmrl.training.run as run_mod

orig_loop = run_mod._loop

def loop(*a, **k):
    print("held", flush=True)
    sys.stdin.readline()
    return orig_loop(*a, **k)

run_mod._loop = loop
s = run_mod.run_training(cfg(sys.argv[1], int(sys.argv[2])), components=comps())
print("done", s.status, s.steps, flush=True)
"""


def _setup():
    ns: dict = {}
    exec(SETUP, ns)  # noqa: S102 - the same helper text the subprocesses run
    return ns["comps"], ns["cfg"]


comps, cfg_for = _setup()


def _assert_complete_and_resumable(run: Path, steps: int) -> None:
    """The folder of a finished run holds everything a run writes and a resume extends it by a step."""
    rd = RunDir(run)
    names = {p.name for p in run.iterdir()}
    assert {"config.yaml", "config.yaml.sha256", OWNER_LOCK, "checkpoints", "metrics.jsonl", "summary.json"} <= names
    assert rd.config_edited() == ""
    assert json.loads(rd.summary.read_text())["status"] == "completed"
    assert [m["step"] for m in read_jsonl(rd.metrics)] == list(range(1, steps + 1))
    s = resume_training(run, [f"optim.steps={steps + 1}"], components=comps())
    assert s.status == "completed" and s.steps == steps + 1


def test_the_trainer_that_loses_the_start_race_leaves_the_winners_folder_whole(tmp_path, monkeypatch):
    """Trainer L finds the folder missing and is held just before it makes it, until trainer W (another
    process) has made it, holds its lock and has written its step-0 checkpoint. L is refused in one line naming
    W; W's folder ends complete and resumes."""
    run = tmp_path / "run"
    winner = subprocess.Popen([sys.executable, "-c", WINNER, str(run), str(STEPS)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT)
    real_mkdir = os.mkdir
    waited = []

    def mkdir(path, *a, **k):  # L makes the run folder (or its temporary twin) only once W holds the folder
        p = Path(os.fsdecode(path))
        if not waited and p.parent == tmp_path and p.name.lstrip(".").startswith("run"):
            waited.append(p)
            line = winner.stdout.readline()
            assert line == "held\n", line + winner.stderr.read()
        return real_mkdir(path, *a, **k)

    monkeypatch.setattr(os, "mkdir", mkdir)
    try:
        with pytest.raises(RunDirError) as e:
            run_training(cfg_for(run, STEPS), components=comps())
        monkeypatch.setattr(os, "mkdir", real_mkdir)
        assert waited, "the loser never made a folder"
        msg = str(e.value)
        assert "\n" not in msg and f"pid {winner.pid} on host" in msg and "in use by another trainer" in msg, msg
        out, err = winner.communicate("go\n", timeout=600)
    finally:
        if winner.poll() is None:
            winner.kill()
            winner.wait()
    assert winner.returncode == 0, err
    assert out.splitlines()[-1] == f"done completed {STEPS}"
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # no temporary folder left beside it
    _assert_complete_and_resumable(run, STEPS)


#: Forks one trainer per phase of ``PHASES`` (argv[1], JSON) into argv[2]/<index>/run, after a warm-up run has
#: imported everything once. Each kills itself (SIGKILL) on entering, or on leaving, the n-th call of the function
#: its phase names ("module:attribute" or "module:Class.method"; on leaving, only calls that returned count). With
#: "fail" its step-0 checkpoint fails first (the policy cannot be saved), so the start goes on to remove what it
#: made. Prints "<index> <minus the signal, or the exit code>" per phase.
KILLED = SETUP + """
import importlib, json, os, signal, sys
import wmrl.training.run as run_mod

def trainer(run, target, when, fail, nth):
    mod_name, _, attr = target.partition(":")
    holder = importlib.import_module(mod_name)
    *path, name = attr.split(".")
    for p in path:
        holder = getattr(holder, p)
    orig = getattr(holder, name)
    calls = []

    def die(*a, **k):  # counts the calls entered (before) or the calls that returned (after)
        if when == "before":
            calls.append(1)
            if len(calls) == nth:
                os.kill(os.getpid(), signal.SIGKILL)
        r = orig(*a, **k)
        if when == "after":
            calls.append(1)
            if len(calls) == nth:
                os.kill(os.getpid(), signal.SIGKILL)
        return r

    setattr(holder, name, die)
    c = comps()
    if fail == "fail":
        def no_save(d):
            raise OSError("disk full")
        c.policy.save = no_save
    try:
        run_mod.run_training(cfg(run, 2), components=c)
    except OSError:
        pass

import torch
torch.set_num_threads(1)  # no thread pool in the forked trainers
run_mod.run_training(cfg(os.path.join(sys.argv[2], "warm-up"), 1), components=comps())  # every lazy import, once
for i, phase in enumerate(json.loads(sys.argv[1])):
    base = os.path.join(sys.argv[2], str(i))
    os.makedirs(base)
    pid = os.fork()
    if pid == 0:
        try:
            trainer(os.path.join(base, "run"), *phase)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    print(i, -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status), flush=True)
"""

#: Each phase of a start: (function, before/after, whether the step-0 checkpoint fails so that the start removes
#: what it made, which call of the function).
PHASES = [
    ("os:mkdir", "after", "ok", 1),  # the folder (or its temporary twin) made, nothing in it
    ("os:rename", "after", "ok", 1),  # the folder in place with its lock (or the first checkpoint published)
    ("wmrl.runs.rundir:RunDir.create", "after", "ok", 1),
    ("wmrl.runs.lifecycle:save_config", "after", "ok", 1),
    ("wmrl.runs.rundir:RunDir.save_config_hash", "after", "ok", 1),
    ("wmrl.training.run:seed_everything", "after", "ok", 1),
    ("wmrl.training.run:Trainer", "after", "ok", 1),
    ("wmrl.runs.rundir:RunDir.truncate_logs", "after", "ok", 1),
    ("tests.support.fakes:FakePolicy.save", "after", "ok", 1),  # inside the step-0 checkpoint
    ("wmrl.runs.owner:RunDirOwner.undo_start", "before", "fail", 1),  # the failed start about to remove what it made
    *[("os:unlink", "after", "fail", n) for n in (1, 2, 3, 4)],  # ... having removed its first files
    *[("os:rmdir", "after", "fail", n) for n in (2, 3)],  # ... and folders
]


def test_a_trainer_killed_at_any_phase_of_its_start_leaves_no_half_deleted_folder(tmp_path):
    """After the kill the folder is absent, or a new start there trains, or (it holds a run) a resume finishes
    it; never a folder that neither starts nor resumes. No temporary folder outlives the next start."""
    r = subprocess.run([sys.executable, "-c", KILLED, json.dumps(PHASES), str(tmp_path)], capture_output=True,
                       text=True, env=ENV, cwd=ROOT, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == [w for i in range(len(PHASES)) for w in (str(i), "-9")], (r.stdout, r.stderr[-3000:])
    for i, phase in enumerate(PHASES):
        run = tmp_path / str(i) / "run"
        if not run.exists():
            s = run_training(cfg_for(run, STEPS), components=comps())
        else:
            try:
                s = run_training(cfg_for(run, STEPS), components=comps())
            except RunDirError as e:
                assert "already holds a run" in str(e), (phase, str(e))
                s = resume_training(run, components=comps())
        assert s.status == "completed" and s.steps == STEPS, phase
        assert sorted(p.name for p in run.parent.iterdir()) == ["run"], phase
