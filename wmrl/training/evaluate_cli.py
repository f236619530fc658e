"""``wmrl eval RUN_DIR``: real-execution evaluation of any checkpoint of a run."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from wmrl.training.config import ConfigError, load_config
from wmrl.training.rundir import RunDir


INITIAL = "initial"


def evaluate_run(run_dir: str | Path, *, checkpoint: str | int = "latest", task_ids: list[str] | None = None,
                 train_tasks: bool = False, samples_per_task: int | None = None,
                 out_name: str = "eval_cli.jsonl") -> list[dict[str, Any]]:
    """Evaluate the policy of one checkpoint with real execution.

    Args:
        run_dir: a run directory written by ``wmrl train``.
        checkpoint: ``"latest"``, a step number, a folder name (``step_000004``), or ``"initial"``:
            the run's policy before training (step 0), rebuilt from its config (the seeded backbone,
            as it is under full fine-tuning, or with a fresh LoRA adapter whose zero-initialised B makes
            it the base model exactly), for runs whose step-0 checkpoint was pruned.
        task_ids: tasks to evaluate on (split ``custom``); None = the run's held-out tasks and, when
            ``eval.train_tasks`` is on, its train tasks.
        train_tasks: evaluate on the run's train tasks only (split ``train``): how well the policy does
            on the tasks it was trained on (in distribution).
        samples_per_task: None = the run's ``eval.samples_per_task``.
        out_name: JSON-lines file in ``run_dir`` the records are appended to.

    Returns:
        The ``eval.jsonl``-style records (one per split), with ``checkpoint`` set.

    Raises:
        FileNotFoundError: not a run directory, or the checkpoint does not exist (message lists them).
        ConfigError: an unknown task id, or a task without a leaderboard.
    """
    from wmrl.models.policy import Policy
    from wmrl.models.scaffolds import DEFAULT_SCAFFOLD, get_scaffold
    from wmrl.training.evaluation import episode_eval_kwargs, evaluate_policy
    from wmrl.training.parts import (load_policy_backbone, make_executor, policy_lora, require_leaderboards,
                                     require_sound, resolve_tasks)
    from wmrl.training.rundir import to_json_line
    from wmrl.training.components import eval_sampling_seed

    rd = RunDir(run_dir)
    if not rd.config.is_file():
        raise FileNotFoundError(f"{rd.root} does not exist: pass a run directory written by `wmrl train`"
                                if not rd.root.exists() else f"{rd.root} has no config.yaml: not a run directory")
    cfg = load_config(rd.config)
    if str(checkpoint) == INITIAL:
        ck, step = None, 0
    else:
        ck = rd.checkpoint(int(checkpoint) if str(checkpoint).isdigit() else str(checkpoint))
        step = int(json.loads((ck / "trainer_state.json").read_text())["step"])
    train, heldout = resolve_tasks(cfg)
    if task_ids and train_tasks:
        raise ConfigError("give either --tasks or --train-tasks, not both")
    if train_tasks:
        splits = [("train", train)]
    elif task_ids:
        from wmrl.tasks.loader import TaskSuite, default_suite

        suite = TaskSuite(cfg.tasks.root) if cfg.tasks.root else default_suite()
        try:
            splits = [("custom", [suite.get(t) for t in task_ids])]
        except KeyError as e:
            raise ConfigError(str(e.args[0])) from None
        require_leaderboards(splits[0][1], "--tasks")
        require_sound(splits[0][1], "--tasks")
    else:
        splits = ([("heldout", heldout)] if heldout else []) + ([("train", train)] if cfg.eval.train_tasks else [])
    if cfg.threads:
        import torch

        torch.set_num_threads(cfg.threads)
    model, tok = load_policy_backbone(cfg)
    policy = Policy(model, tok, lora=policy_lora(cfg))
    policy.sampling_engine = cfg.rollout.engine
    if ck is not None:
        policy.load(ck / "policy")
    scaffold = get_scaffold(cfg.scaffold.name or DEFAULT_SCAFFOLD)
    executor = make_executor(cfg, rd.executions)
    recs = []
    try:
        for split, tasks in splits:
            rec, _ = evaluate_policy(policy, scaffold, tasks, executor, step=step, split=split,
                                     samples_per_task=samples_per_task or cfg.eval.samples_per_task,
                                     max_new_tokens=cfg.rollout.max_new_tokens, temperature=cfg.eval.temperature,
                                     top_p=cfg.rollout.top_p, checkpoint=ck.name if ck is not None else INITIAL,
                                     run_name=cfg.name or cfg.method,
                                     seed=eval_sampling_seed(cfg.seed, step, split, bool(heldout)),
                                     **episode_eval_kwargs(cfg))
            recs.append(rec)
            with open(rd.root / out_name, "a") as fh:
                fh.write(to_json_line(rec) + "\n")
    finally:
        executor.close()
    return recs
