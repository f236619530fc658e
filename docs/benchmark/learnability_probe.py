"""How fast does the trainer move the cpu-small policy when the reward is easy? (docs/benchmark.md)

GRPO with the cpu-small policy (the tiny random-initialised backbone + LoRA, grammar scaffold, the four
cpu-small train tasks, 4 tasks x 4 samples per step) against a deterministic reward: 1 when the
sampled pipeline's estimator is of the TARGET family, else 0, with no execution at all. Prints the
fraction of rewarded samples per step: a policy that learns drives it towards 1.

    WMRL_HOME=... python docs/benchmark/learnability_probe.py LR [STEPS] [TARGET]
    # e.g. 1e-3 25 HistGradientBoosting
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from concurrent.futures import Future
from pathlib import Path

from wmrl.execution.types import ExecutionResult, ExecutionStatus, program_hash
from wmrl.models import backbone
from wmrl.models.policy import Policy
from wmrl.models.scaffolds import get_scaffold
from wmrl.models.types import LoraSettings
from wmrl.training import parts
from wmrl.training.config import load_config
from wmrl.training.trainer import Components, run_training

TRAIN = "[modeldata-credit_data,modeldata-wa_churn,aer-hmda,modeldata-lending_club]"


class FamilyReward:
    """An executor stand-in: reward 1 when the program's pipeline line names ``target``, else 0."""

    def __init__(self, target: str):
        self.target = target

    def submit(self, req):
        hit = any("make_pipeline(" in line and self.target in line and "import" not in line
                  for line in req.program.splitlines())
        r = 1.0 if hit else 0.0
        f: Future = Future()
        f.set_result(ExecutionResult(req.request_id, req.task.id, ExecutionStatus.OK, r, r, 0.0, 0.0, 0, "", "",
                                     program_hash(req.program)))
        return f

    def close(self):
        pass


def main(lr: float, steps: int, target: str) -> None:
    run_dir = Path(tempfile.mkdtemp(prefix="wmrl-probe-"))
    cfg = load_config(None, [
        "method=grpo", f"run_dir={run_dir}", f"optim.steps={steps}", f"optim.lr={lr}", "progress=false",
        "rollout.tasks_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=96", "eval.at_end=false",
        "model.name=tiny", "model.lora_r=8", "model.lora_alpha=16", "scaffold.name=grammar", "threads=1",
        f"tasks.train={TRAIN}", "tasks.heldout=[]"])
    train, _ = parts.resolve_tasks(cfg)
    model, tok = backbone.tiny_backbone(seed=cfg.seed)
    policy = Policy(model, tok, lora=LoraSettings(r=8, alpha=16, dropout=0.0))
    t0 = time.time()
    run_training(cfg, components=Components(train_tasks=train, heldout_tasks=[], scaffold=get_scaffold("grammar"),
                                            policy=policy, executor=FamilyReward(target)))
    rows = [json.loads(line) for line in open(run_dir / "metrics.jsonl")]
    print(f"lr={lr} target={target}: rewarded fraction per step "
          f"{[round(r['reward_true_mean'], 2) for r in rows]} ({time.time() - t0:.0f} s)")
    shutil.rmtree(run_dir)


if __name__ == "__main__":
    main(float(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 25,
         sys.argv[3] if len(sys.argv) > 3 else "HistGradientBoosting")
