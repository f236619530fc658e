"""The learnability probe: can the trainer move the policy at all when the reward is easy?

GRPO through the real trainer (:func:`wmrl.training.run.run_training`: sampling, advantages, the
clipped loss, AdamW, checkpoints) against a deterministic reward instead of execution: 1 when the
sampled pipeline's estimator is of the ``target`` family, else 0. A policy that can learn drives the
rewarded fraction towards 1 within a few dozen steps; one that cannot (a frozen random head under
LoRA, non-canonical tokenizations) stays at the family's prior share. CI runs it on the tiny backbone
(``tests/training/test_learnability.py``); ``docs/training.md`` has the same probe on SmolLM2.

    python -m wmrl.training.learnability --model tiny --lr 3e-3 --steps 25
    python -m wmrl.training.learnability --model smollm2-135m --lr 2e-4 --steps 10
"""
from __future__ import annotations

import argparse
import re
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path

from wmrl.execution.types import ExecutionRequest, ExecutionResult, ExecutionStatus, program_hash
from wmrl.models.scaffolds import get_scaffold, grammar_sentences

#: The cpu-small train tasks (binary classification, 1.5k-10k rows).
DEFAULT_TASKS = ("modeldata-credit_data", "modeldata-wa_churn", "aer-hmda", "modeldata-lending_club")


class FamilyReward:
    """An :class:`wmrl.interfaces.Executor` stand-in: reward 1.0 when the program's ``make_pipeline``
    line names ``target`` (e.g. ``"HistGradientBoosting"``), else 0.0; nothing is executed."""

    def __init__(self, target: str):
        self.target = target

    def reward(self, program: str) -> float:
        """1.0 when a ``make_pipeline(`` line (not an import) of ``program`` names the target family."""
        hit = any("make_pipeline(" in line and self.target in line and "import" not in line
                  for line in program.splitlines())
        return 1.0 if hit else 0.0

    def submit(self, request: ExecutionRequest) -> Future[ExecutionResult]:
        """A finished future with status ``ok`` and score = reward = :meth:`reward`."""
        r = self.reward(request.program)
        f: Future = Future()
        f.set_result(ExecutionResult(request.request_id, request.task.id, ExecutionStatus.OK, r, r, 0.0, 0.0, 0,
                                     "", "", program_hash(request.program)))
        return f

    def run_batch(self, requests: Sequence[ExecutionRequest]) -> list[ExecutionResult]:
        """:meth:`submit` for each request, in order."""
        return [self.submit(r).result() for r in requests]

    def close(self) -> None:
        """Nothing to stop."""


def run_probe(*, model: str = "tiny", lr: float = 3e-3, steps: int = 25, target: str = "HistGradientBoosting",
              tasks: tuple[str, ...] = DEFAULT_TASKS, tasks_per_step: int = 4, group_size: int = 4,
              seed: int = 0, run_dir: str | Path | None = None, overrides: tuple[str, ...] = ()) -> list[float]:
    """Run the probe; returns the rewarded fraction of each step's samples (before its update).

    Args:
        model: ``model.name`` (``tiny``: full fine-tuning by default; a pretrained model: LoRA).
        lr: AdamW learning rate. steps: GRPO steps. target: the rewarded estimator family.
        tasks: train task ids of the built-in suite (``wmrl tasks build``).
        tasks_per_step, group_size: M groups of G samples per step.
        seed: the run's seed (backbone initialisation, sampling).
        run_dir: where the run directory goes (default: a temporary folder, removed afterwards).
        overrides: further ``key=value`` config overrides.

    Raises:
        SuiteNotBuilt, ConfigError: as :func:`wmrl.training.run.run_training` (e.g. ``steps < 1``).
        FileNotFoundError: an unknown ``model`` (nothing can be downloaded).
    """
    from wmrl.models.policy import Policy  # noqa: PLC0415 - heavy: loads torch
    from wmrl.training import parts  # noqa: PLC0415 - heavy: loads torch
    from wmrl.training.config import load_config  # noqa: PLC0415 - heavy: loads torch
    from wmrl.training.components import Components  # noqa: PLC0415 - heavy: loads torch
    from wmrl.training.run import run_training  # noqa: PLC0415 - heavy: loads torch

    tmp = run_dir is None
    rd = Path(run_dir) if run_dir is not None else Path(tempfile.mkdtemp(prefix="wmrl-probe-"))
    try:
        cfg = load_config(None, [
            "method=grpo", f"run_dir={rd / 'run'}", f"optim.steps={steps}", f"optim.lr={lr}", "progress=false",
            f"rollout.tasks_per_step={tasks_per_step}", f"rollout.group_size={group_size}", "eval.at_end=false",
            f"model.name={model}", "scaffold.name=grammar", "threads=1", f"seed={seed}",
            f"tasks.train=[{','.join(tasks)}]", "tasks.heldout=[]", *overrides])
        train, _ = parts.resolve_tasks(cfg)
        backbone, tok = parts.load_policy_backbone(cfg)
        policy = Policy(backbone, tok, lora=parts.policy_lora(cfg))
        comps = Components(train_tasks=train, heldout_tasks=[], scaffold=get_scaffold("grammar"), policy=policy,
                           executor=FamilyReward(target))
        run_training(cfg, components=comps)
        rows = [json.loads(line) for line in open(rd / "run" / "metrics.jsonl")]
        return [float(r["reward_true_mean"]) for r in rows]
    finally:
        if tmp:
            shutil.rmtree(rd, ignore_errors=True)


def check_target(target: str) -> None:
    """Refuse a ``target`` that makes the probe meaningless: empty, or naming no grammar pipeline's model
    (every reward 0) or every one of them (every reward 1).

    Raises:
        ValueError: naming the target and the model families it could be.
    """
    sentences = [s for k in ("classifier", "regressor") for s in grammar_sentences(k)]
    hits = sum(target in s for s in sentences) if target.strip() else 0
    if not target.strip() or hits in (0, len(sentences)):
        names = {n for s in sentences for n in re.findall(r"([A-Z][A-Za-z]+)\(", s)}
        families = sorted(names - {"PCA", "StandardScaler", "MinMaxScaler", "RobustScaler", "QuantileTransformer"})
        what = "is empty" if not target.strip() else ("names no pipeline of the grammar" if hits == 0
                                                       else "is in every pipeline of the grammar")
        raise ValueError(f"--target {target!r} {what}: name one model family, e.g. one of {', '.join(families)}")


def main(argv: list[str] | None = None) -> None:
    """Command line: prints the rewarded fraction per step and the wall time; a bad argument or config
    is one line on stderr and exit code 2."""
    from wmrl.tasks.loader import SuiteNotBuilt  # noqa: PLC0415 - heavy: loads pandas
    from wmrl.training.config import ConfigError  # noqa: PLC0415 - heavy: loads torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny", help="model.name: 'tiny' (random, every weight trains), "
                    "'smollm2-135m' (LoRA) or a local model folder (default: tiny)")
    ap.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate (default: 3e-3)")
    ap.add_argument("--steps", type=int, default=25, help="GRPO steps (default: 25)")
    ap.add_argument("--target", default="HistGradientBoosting",
                    help="the rewarded model family, a substring of the pipeline (default: HistGradientBoosting)")
    ap.add_argument("--tasks", default=",".join(DEFAULT_TASKS),
                    help="comma-separated train task ids (default: the cpu-small train tasks)")
    ap.add_argument("--seed", type=int, default=0, help="the run's seed (default: 0)")
    ap.add_argument("--set", action="append", default=[], help="extra config override key=value (repeatable)")
    a = ap.parse_args(argv)
    t0 = time.time()
    try:
        check_target(a.target)
        tasks = tuple(t.strip() for t in a.tasks.split(",") if t.strip())
        fr = run_probe(model=a.model, lr=a.lr, steps=a.steps, target=a.target, seed=a.seed, tasks=tasks,
                       overrides=tuple(a.set))
    except (ConfigError, SuiteNotBuilt, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"model={a.model} lr={a.lr} target={a.target} seed={a.seed}: rewarded fraction per step "
          f"{[round(x, 2) for x in fr]} ({time.time() - t0:.0f} s)")


if __name__ == "__main__":  # pragma: no cover
    main()
