"""``wmrl eval RUN_DIR``: real-execution evaluation of any checkpoint of a run, optionally under an evaluation
protocol (:mod:`wmrl.training.protocol`)."""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


from wmrl.models.policy import Policy
from wmrl.models.scaffolds import DEFAULT_SCAFFOLD, get_scaffold
from wmrl.tasks import loader as task_loader
from wmrl.tasks.checks import ONE_TURN_CONFIG, view_problems
from wmrl.training.components import eval_sampling_seed
from wmrl.training.config import ConfigError, load_config
from wmrl.runs.rundir import RunDir
from wmrl.runs.rundir import to_json_line
from wmrl.training.protocol import aggregate, get_protocol, with_overrides
from wmrl.training.parts import (check_outputs_fit, load_policy_backbone, make_executor, outputs_misfit, policy_lora,
                                 require_leaderboards, require_sound, resolve_tasks)
from wmrl.training.evaluation import episode_eval_kwargs, evaluate_policy


INITIAL = "initial"


def find_split(suite: Any, ids: list[str]) -> tuple[list[Any], list[tuple[str, str]]]:
    """The tasks of a protocol's split found in ``suite`` (split order) and, for every id not found, why.

    Returns:
        ``(tasks, missing)``: ``missing`` holds ``(id, reason)`` with the reason the loader gave (refused and why,
        benchmark package metadata without prepared data) or "not found under <roots>".
    """
    found, missing = [], []
    known = suite.discovery.tasks
    refused = {tid: why for tid, _, why in suite.discovery.refused}
    skipped = {Path(folder).name: why for folder, why in suite.discovery.skipped}
    for tid in ids:
        if tid in known:
            found.append(known[tid])
        elif tid in refused:
            missing.append((tid, f"refused: {refused[tid]}"))
        elif tid in skipped:
            missing.append((tid, skipped[tid]))
        else:
            missing.append((tid, f"not found under {', '.join(map(str, suite.roots))}"))
    return found, missing


def missing_advice(name: str, n_split: int, missing: list[tuple[str, str]], *, any_found: bool) -> str:
    """The error for competitions of protocol ``name``'s split that are missing (``missing``: ``(id, reason)``
    from :func:`find_split`): each id with its reason, then what to do, told apart by why it is missing: a
    competition refused at load names its cause (fix that; preparing it again changes nothing), one not found
    or without prepared data is to be prepared and its folder given with ``--root``, one the run's scaffold cannot
    write (its reason starts with ``scaffold``, :func:`~wmrl.training.parts.outputs_misfit`) needs another scaffold,
    one without a validation view under multi-turn episodes (its reason starts with ``no validation view``) one turn
    per episode."""
    listed = "\n".join(f"  {tid}: {why}" for tid, why in missing)
    refused = [tid for tid, why in missing if why.startswith("refused: ")]
    unwritable = [tid for tid, why in missing if why.startswith("scaffold ")]
    viewless = [tid for tid, why in missing if why.startswith("no validation view")]
    absent = [tid for tid, _ in missing if tid not in refused and tid not in unwritable and tid not in viewless]
    fixes = []
    if refused:
        fixes.append(f"{len(refused)} ({', '.join(refused)}) {'is' if len(refused) == 1 else 'are'} prepared but "
                     "refused at load: fix the cause named on its line (install the module its grading code "
                     "needs, set the key its hints file lacks), then check it with 'wmrl tasks check ID --root DIR'")
    if absent:
        fixes.append(f"{len(absent)} ({', '.join(absent)}) {'is' if len(absent) == 1 else 'are'} not prepared under "
                     "the roots: prepare them (e.g. MLE-Dojo's prepare/mle.py) and pass their folder with --root")
    if unwritable:
        fixes.append(f"{len(unwritable)} ({', '.join(unwritable)}) {'is' if len(unwritable) == 1 else 'are'} loaded "
                     "but the run's scaffold cannot write their submission: evaluate a run whose scaffold.name is "
                     "'script'")
    if viewless:
        fixes.append(f"{len(viewless)} ({', '.join(viewless)}) {'has' if len(viewless) == 1 else 'have'} no "
                     "validation view, which every turn but the last runs on: evaluate with one turn per episode "
                     "(--override max_turns=1)")
    head = (f"none of the {n_split} competitions of protocol {name!r} can be evaluated" if not any_found else
            f"{len(missing)} of the {n_split} competitions of protocol {name!r} are missing")
    tail = "" if not any_found else ("; or evaluate the rest with --allow-missing (the numbers are then not "
                                     "comparable with the protocol's)")
    return f"{head}:\n{listed}\n" + "; ".join(fixes) + tail


def evaluate_run(run_dir: str | Path, *, checkpoint: str | int = "latest", task_ids: list[str] | None = None,
                 train_tasks: bool = False, samples_per_task: int | None = None,
                 out_name: str = "eval_cli.jsonl", protocol: Any = None, roots: Sequence[str | Path] | None = None,
                 allow_missing: bool = False, overrides: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Evaluate the policy of one checkpoint with real execution, optionally under an evaluation protocol.

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
        samples_per_task: None = the run's ``eval.samples_per_task`` (or the protocol's).
        out_name: JSON-lines file in ``run_dir`` the records are appended to.
        protocol: None or ``"default"``: the evaluation as without protocols. Else a registered name, a YAML
            path or an :class:`~wmrl.training.protocol.EvalProtocol` (:func:`~wmrl.training.protocol.get_protocol`):
            its settings replace the run's, its split (when it has one) is looked up under ``roots``, and each
            record gets ``protocol`` (its fields) and ``protocol_result`` (:func:`~wmrl.training.protocol.aggregate`).
        roots: task roots to look the protocol's split (or ``task_ids``) up in; None = the run's ``tasks.root``,
            else the default suite.
        allow_missing: evaluate the competitions of the split that are found when some are missing (the result
            says it is not comparable); by default a missing competition is an error. A competition of the split
            the run's scaffold cannot write a submission for (:func:`~wmrl.training.parts.outputs_misfit`) is not
            run and scores the protocol's failure score on every sample, as the reference implementation scores a
            failed submission (:func:`~wmrl.training.protocol.aggregate`, ``unwritable``). Under more than one
            turn per episode, a competition without a validation view (:func:`wmrl.tasks.checks.view_problems`: a
            sample submission's table) counts as missing, with that reason.
        overrides: ``KEY=VALUE`` changes of the protocol's sampling settings
            (:func:`~wmrl.training.protocol.with_overrides`), e.g. ``samples_per_task=1`` to run it small on a CPU;
            the result then says it is not comparable.

    Returns:
        The ``eval.jsonl``-style records (one per split; one record, split ``protocol``, for a protocol with a
        split), with ``checkpoint`` set.

    Raises:
        FileNotFoundError: not a run directory, or the checkpoint does not exist (message lists them).
        ConfigError: an unknown task id, a task without a leaderboard, an unknown or bad protocol, options that
            contradict the protocol, competitions of the split missing under the roots (listed, with why), or,
            with more than one turn per episode, a task without a validation view (a sample submission's table:
            the message says to run one turn).
    """

    rd = RunDir(run_dir)
    if not rd.config.is_file():
        raise FileNotFoundError(f"{rd.root} does not exist: pass a run directory written by `wmrl train`"
                                if not rd.root.exists() else f"{rd.root} has no config.yaml: not a run directory")
    cfg = load_config(rd.config)
    proto = get_protocol(protocol) if protocol is not None else None
    if proto is not None and proto.name == "default":
        proto = None
    changes: list[str] = []
    if overrides:
        if proto is None:
            raise ConfigError("--override changes a protocol's settings; give one with --protocol (the run's own "
                              "settings are changed with `wmrl train --set`)")
        proto, changes = with_overrides(proto, overrides)
    if str(checkpoint) == INITIAL:
        ck, step = None, 0
    else:
        ck = rd.checkpoint(int(checkpoint) if str(checkpoint).isdigit() else str(checkpoint))
        step = int(json.loads((ck / "trainer_state.json").read_text())["step"])
    if task_ids and train_tasks:
        raise ConfigError("give either --tasks or --train-tasks, not both")
    missing: list[tuple[str, str]] = []
    unwritable: dict[str, str] = {}

    def _suite() -> Any:
        if roots:
            return task_loader.TaskSuite(list(roots))
        return task_loader.TaskSuite(cfg.tasks.root) if cfg.tasks.root else task_loader.default_suite()

    if proto is not None and proto.split is not None:
        if task_ids or train_tasks:
            raise ConfigError(f"protocol {proto.name!r} fixes the tasks (its split of {len(proto.split)}); do not "
                              "pass --tasks or --train-tasks with it")
        found, missing = find_split(_suite(), list(proto.split))
        unwritable = outputs_misfit(get_scaffold(cfg.scaffold.name or DEFAULT_SCAFFOLD), found)
        found = [t for t in found if t.id not in unwritable]
        turns = proto.max_turns if proto.max_turns is not None else cfg.episode.max_turns
        if turns > 1:  # every turn but the last runs on the task's validation view
            views = {t.id: view_problems(t, cfg.episode.validation_fraction) for t in found}
            missing += [(tid, f"no validation view for {turns}-turn episodes: {p[0].message}")
                        for tid, p in views.items() if p]
            found = [t for t in found if not views[t.id]]
        if not found:
            missing += list(unwritable.items())
        missing.sort(key=lambda m: proto.split.index(m[0]))  # type: ignore[union-attr]
        if missing and (not found or not allow_missing):
            raise ConfigError(missing_advice(proto.name, len(proto.split), missing, any_found=bool(found)))
        require_leaderboards(found, f"protocol {proto.name!r}")
        require_sound(found, f"protocol {proto.name!r}")
        splits, has_heldout = [("protocol", found)], False
    else:
        if allow_missing:
            raise ConfigError("--allow-missing goes with a protocol that has a split of competitions (e.g. "
                              "--protocol paper)")
        if roots and not task_ids:
            raise ConfigError("--root is for a protocol's split or --tasks; the run's own tasks come from its "
                              "tasks.root")
        train, heldout = resolve_tasks(cfg)
        has_heldout = bool(heldout)
        if train_tasks:
            splits = [("train", train)]
        elif task_ids:
            suite = _suite()
            try:
                splits = [("custom", [suite.get(t) for t in task_ids])]
            except KeyError as e:
                raise ConfigError(str(e.args[0])) from None
            require_leaderboards(splits[0][1], "--tasks")
            require_sound(splits[0][1], "--tasks")
        else:
            splits = ([("heldout", heldout)] if heldout else []) + ([("train", train)] if cfg.eval.train_tasks else [])
    if proto is not None:
        if proto.samples_per_task is not None and samples_per_task is not None \
                and samples_per_task != proto.samples_per_task:
            raise ConfigError(f"--samples {samples_per_task} contradicts protocol {proto.name!r} "
                              f"(samples_per_task: {proto.samples_per_task}); drop --samples, or change it with "
                              f"--override samples_per_task={samples_per_task} (the result is then not comparable)")
        if proto.score == "percentile":
            rpg = [t.id for _, ts in splits for t in ts if getattr(t, "reward_kind", "percentile") != "percentile"]
            if rpg:
                raise ConfigError(f"protocol {proto.name!r} scores leaderboard percentiles, but {', '.join(rpg)} "
                                  "have no leaderboard (rewarded by RPG); give them the benchmark's leaderboard "
                                  "files, or use a protocol with score: reward")
        for _, ts in splits:
            for t in ts:
                proto.category_of(t.id)
    ep_kw = episode_eval_kwargs(cfg)
    if proto is not None and proto.samples_per_task is not None:
        k = proto.samples_per_task
    else:
        k = samples_per_task or cfg.eval.samples_per_task
    temperature, top_p, max_new, time_limit = cfg.eval.temperature, cfg.rollout.top_p, cfg.rollout.max_new_tokens, None
    if proto is not None:
        ep_kw["max_turns"] = proto.max_turns if proto.max_turns is not None else ep_kw["max_turns"]
        temperature = proto.temperature if proto.temperature is not None else temperature
        top_p = proto.top_p if proto.top_p is not None else top_p
        max_new = proto.max_new_tokens if proto.max_new_tokens is not None else max_new
        time_limit = proto.time_limit_s
    check_outputs_fit(get_scaffold(cfg.scaffold.name or DEFAULT_SCAFFOLD), [t for _, ts in splits for t in ts])
    if ep_kw["max_turns"] > 1:  # every turn but the last is run on the task's validation view
        require_sound([t for _, ts in splits for t in ts], f"{ep_kw['max_turns']}-turn episodes",
                      ep_kw["validation_fraction"],
                      "--override max_turns=1" if proto is not None else ONE_TURN_CONFIG)
    if cfg.threads:
        import torch  # noqa: PLC0415 - heavy

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
                                     samples_per_task=k, max_new_tokens=max_new, temperature=temperature,
                                     top_p=top_p, checkpoint=ck.name if ck is not None else INITIAL,
                                     run_name=cfg.name or cfg.method,
                                     seed=eval_sampling_seed(cfg.seed, step, split, has_heldout),
                                     time_limit_s=time_limit, **ep_kw)
            if proto is not None:
                rec["protocol"] = proto.model_dump()
                rec["protocol_result"] = aggregate(proto, rec["sample_outcomes"], k,
                                                   missing=dict(missing), changes=changes,
                                                   unwritable=unwritable)
            recs.append(rec)
            with open(rd.root / out_name, "a") as fh:
                fh.write(to_json_line(rec) + "\n")
    finally:
        executor.close()
    return recs
