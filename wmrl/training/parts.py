"""Building the trainer's parts from a config: tasks, scaffold, policy, executor, world model.

The only module of ``wmrl.training`` that knows the concrete classes of the other packages; the
trainer itself sees them through :class:`wmrl.training.components.Components`. Heavy imports (torch,
transformers) happen inside the functions.

Why one file of about 560 lines: it is the one place that maps config sections to concrete classes, so that no other
module of the package does; splitting it would spread that knowledge again.
"""
from __future__ import annotations

import copy
import logging
import math
import shutil
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from wmrl.core.recipe import get_recipe
from wmrl.execution.cache import CachingExecutor
from wmrl.execution.log import ExecutionLog
from wmrl.execution.pool import LocalExecutor
from wmrl.execution.ray_pool import RayExecutor
from wmrl.execution.sandbox import SandboxConfig, source_gap
from wmrl.models import backbone
from wmrl.models.policy import Policy
from wmrl.models.scaffolds import DEFAULT_SCAFFOLD, get_scaffold
from wmrl.models.types import LoraSettings
from wmrl.tasks.checks import ONE_TURN_CONFIG, UnsoundTask, require_sound_tasks
from wmrl.tasks.harness import template_misfit
from wmrl.tasks.splits import SplitError, heldout_ids
from wmrl.training.components import Components, now_iso, sampling_seed
from wmrl.training.config import ConfigError, TrainConfig
from wmrl.runs.ledger import Ledger
from wmrl.runs.rundir import RunDir, write_json_atomic
from wmrl.models.corpus import collect_warmup
from wmrl.world_model.factory import load_world_model, new_world_model
from wmrl.tasks.loader import TaskSuite, default_suite

log = logging.getLogger(__name__)


def refusal_warnings(refused: list[tuple[str, Any, str]]) -> list[str]:
    """One line per task the discovery of the task roots refused (``Discovery.refused``): its id and why."""
    return [f"tasks.root: task {tid} refused and left out: {why}" for tid, _, why in refused]


def resolve_tasks(cfg: TrainConfig, warn: Callable[[str], None] | None = None) -> tuple[list[Any], list[Any]]:
    """The train and held-out tasks of the config.

    When the tasks are drawn from the roots (``tasks.train`` or ``tasks.heldout`` null, or
    ``tasks.heldout_split``), every task under the roots that was refused (cannot be graded) is named with
    its reason, one line each (:func:`refusal_warnings`), through ``warn`` (default: this module's logger,
    level WARNING), and so is every inference of a chosen task's loader that may be wrong (``Task.warnings``:
    a type guessed from the answers); a task named in ``tasks.train`` or ``tasks.heldout`` that was refused is an error.

    Args:
        cfg: the training config. warn: ``warn(line)`` for each refused task (None: ``log.warning``).

    Raises:
        SuiteNotBuilt: no suite (message says to run ``wmrl tasks build``).
        ConfigError: an unknown or refused task id (message lists the known ones or says why it was
            refused), no gradable train task left, a task without a leaderboard, or one that fails
            :func:`wmrl.tasks.checks.check_task` (answers in ``public/``, a metric that disagrees with
            its leaderboard; with ``episode.max_turns`` > 1 also a validation view that cannot be built or
            holds answers).
    """

    suite = TaskSuite(cfg.tasks.root) if cfg.tasks.root else default_suite()
    disc = getattr(suite, "discovery", None)
    refused = list(disc.refused) if disc is not None else []
    from_roots = cfg.tasks.train is None or cfg.tasks.heldout is None or bool(getattr(cfg.tasks, "heldout_split", None))
    if refused and from_roots:
        for line in refusal_warnings(refused):
            (warn or log.warning)(line)

    def _get(ids: list[str], key: str) -> list[Any]:
        out = []
        for i in ids:
            try:
                out.append(suite.get(i))
            except KeyError as e:
                raise ConfigError(f"{key}: {e.args[0]}") from None
        return out

    split_spec = getattr(cfg.tasks, "heldout_split", None)
    if split_spec:
        if cfg.tasks.heldout is not None:
            raise ConfigError("give either tasks.heldout (ids) or tasks.heldout_split, not both")
        try:
            held_ids = heldout_ids(suite.tasks(), split_spec, cfg.seed, refused={tid: why for tid, _, why in refused})
        except SplitError as e:
            raise ConfigError(str(e)) from None
        heldout = [suite.get(i) for i in held_ids]
        train = _get(cfg.tasks.train, "tasks.train") if cfg.tasks.train is not None else [
            t for t in suite.tasks() if t.id not in set(held_ids)]
    else:
        train = _get(cfg.tasks.train, "tasks.train") if cfg.tasks.train is not None else suite.tasks("train")
        heldout = _get(cfg.tasks.heldout, "tasks.heldout") if cfg.tasks.heldout is not None else suite.tasks("heldout")
    if not train:
        found = disc.summary() if disc is not None else f"no task of the 'train' split in {suite.root}"
        why = (f"{len(refused)} task(s) under the roots were refused (cannot be graded), each named with its reason: "
               if refused else "")
        fix = "fix the refused tasks (see `wmrl tasks check`), " if refused else ""
        raise ConfigError(f"no gradable train task under tasks.root: {why}{found}; {fix}point tasks.root at the "
                          "folders that hold the tasks, or list ids in tasks.train")
    overlap = {t.id for t in train} & {t.id for t in heldout}
    if overlap:
        raise ConfigError(f"tasks {sorted(overlap)} are both train and held-out tasks; held-out tasks must be unseen")
    require_leaderboards(train, "tasks.train")
    require_leaderboards(heldout, "tasks.heldout")
    views = cfg.episode.validation_fraction if cfg.episode.max_turns > 1 else None
    require_sound(train, "tasks.train", views)
    require_sound(heldout, "tasks.heldout", views)
    for t in [*train, *heldout]:
        for line in getattr(t, "warnings", ()):
            (warn or log.warning)(f"tasks: {line}")
    return train, heldout


def record_tasks(rd: RunDir, cfg: TrainConfig, train: list[Any], heldout: list[Any]) -> None:
    """Write ``tasks.json`` in the run directory: how the held-out split was made, and per task its split,
    adapter, metric (and where it came from) and reward kind (``percentile`` or ``rpg``)."""

    def row(t: Any, split: str) -> dict[str, Any]:
        return {"id": t.id, "split": split, "adapter": getattr(t, "adapter", getattr(t, "layout", "")),
                "metric": t.metric, "metric_source": getattr(t, "metric_source", ""),
                "reward_kind": getattr(t, "reward_kind", "percentile"), "root": str(t.root)}

    split = getattr(cfg.tasks, "heldout_split", None) or (
        "tasks.heldout ids" if cfg.tasks.heldout is not None else "the suite's heldout split")
    write_json_atomic(rd.root / "tasks.json", {"roots": cfg.tasks.root, "heldout_split": split,
                                               "tasks": [row(t, "train") for t in train]
                                               + [row(t, "heldout") for t in heldout]})


def require_sound(tasks: list[Any], key: str, view_fraction: float | None = None,
                  one_turn: str = ONE_TURN_CONFIG) -> None:
    """Refuse tasks with answers in ``public/`` or a metric that disagrees with its leaderboards
    (:func:`wmrl.tasks.checks.require_sound_tasks`); with ``view_fraction`` (multi-turn episodes) also tasks
    whose validation view at that held-out fraction cannot be built or holds answers, naming ``one_turn`` (how
    the user runs one turn per episode instead).

    Raises:
        ConfigError: naming ``key``, each task and why.
    """

    try:
        require_sound_tasks(tasks, key, view_fraction, one_turn)
    except UnsoundTask as e:
        raise ConfigError(str(e)) from None


def require_leaderboards(tasks: list[Any], key: str) -> None:
    """Refuse tasks without a leaderboard: their executions get no reward (it is a leaderboard
    percentile), so training and evaluation could only drop them.

    Raises:
        ConfigError: naming ``key`` (where the tasks came from) and the tasks.
    """
    missing = [t.id for t in tasks if not getattr(t, "has_reward", t.has_leaderboard)]
    if missing:
        raise ConfigError(f"{key}: task(s) {', '.join(missing)} have no leaderboard and no RPG baseline/gold scores, "
                          f"so their executions get no reward; rebuild the suite with `wmrl tasks build`, add the "
                          f"benchmark's leaderboards or baseline results, or leave them out of {key}")


def load_policy_backbone(cfg: TrainConfig) -> tuple[Any, Any]:
    """The backbone (model, tokenizer) named by ``model.name`` (``tiny`` seeded with ``seed``)."""

    if cfg.model.name == "tiny":
        return backbone.tiny_backbone(seed=cfg.seed)
    return backbone.load_backbone(cfg.model.name)


#: Scaffolds whose programs the policy cannot write freely (a grammar fixes every statement), so
#: they cannot import a data package or open a file; every other scaffold (``script``, ``function``,
#: a user's own) can.
CONSTRAINED_SCAFFOLDS = ("grammar", "grammar-fail", "grammar-fine", "grammar-dense")


def sandbox_config(cfg: TrainConfig) -> Any:
    """The :class:`~wmrl.execution.sandbox.SandboxConfig` of ``executor.sandbox``."""

    return SandboxConfig() if cfg.executor.sandbox else SandboxConfig(use_bwrap=False, allow_unsandboxed=True)


def check_isolation(scaffold_name: str, sandbox: Any, tasks: list[Any]) -> None:
    """Refuse tasks whose answers a free-form program could look up: with a scaffold outside
    :data:`CONSTRAINED_SCAFFOLDS`, every task whose data source the sandbox cannot hide
    (:func:`wmrl.execution.sandbox.source_gap`; all tasks in the rlimit-only mode).

    Raises:
        ConfigError: naming the scaffold, the tasks and why, and how to fix it.
    """

    if scaffold_name in CONSTRAINED_SCAFFOLDS:
        return
    gaps = {t.id: source_gap(getattr(t, "source", "") or "", sandbox) for t in tasks}
    bad = {k: v for k, v in gaps.items() if v}
    if not bad:
        return
    reason = next(iter(bad.values()))
    names = ", ".join(list(bad)[:8]) + (f" and {len(bad) - 8} more" if len(bad) > 8 else "")
    raise ConfigError(f"scaffold {scaffold_name!r} lets the policy write any program, but for task(s) {names} "
                      f"{reason}: a program could read the answers instead of learning; run with "
                      f"executor.sandbox=true (bubblewrap), use the 'grammar' scaffold, or leave these tasks out")


def outputs_misfit(scaffold: Any, tasks: list[Any]) -> dict[str, str]:
    """The tasks ``scaffold`` cannot write a submission for, each with the one-line reason: under a scaffold that
    fills wmrl's program template (one with ``function_source``: ``function``, ``grammar``), every task whose
    submission the template does not write (:func:`wmrl.tasks.harness.template_misfit`: a sample submission's
    table that is not a multi-target regression, e.g. text outputs or several rows per id). Empty for any other
    scaffold.

    Returns:
        ``{task id: reason}`` in ``tasks`` order.
    """
    if not hasattr(scaffold, "function_source"):
        return {}
    name = getattr(scaffold, "name", scaffold)
    why = {t.id: template_misfit(t) for t in tasks if getattr(t, "outputs", ())}
    return {tid: f"scaffold {name!r} fills a program template: {w}; use the 'script' scaffold"
            for tid, w in why.items() if w}


def check_outputs_fit(scaffold: Any, tasks: list[Any]) -> None:
    """Refuse tasks ``scaffold`` cannot write a submission for (:func:`outputs_misfit`).

    Raises:
        ConfigError: naming the scaffold, the tasks and the fix.
    """
    bad = list(outputs_misfit(scaffold, tasks))
    if bad:
        names = ", ".join(bad[:8]) + (f" and {len(bad) - 8} more" if len(bad) > 8 else "")
        raise ConfigError(f"scaffold {getattr(scaffold, 'name', scaffold)!r} fills a program template that writes one "
                          f"id and one target (or a multi-target regression's targets), but the submission of task(s) "
                          f"{names} is the sample submission's table in another shape (several rows per id, text or "
                          "encoded outputs); use the 'script' scaffold, or leave these tasks out")


def policy_lora(cfg: TrainConfig) -> Any:
    """The policy's LoRA settings, or None for full fine-tuning (``model.finetune``; ``auto`` trains
    every weight of a randomly initialised backbone, ``tiny``, and a LoRA adapter otherwise)."""

    full = cfg.model.finetune == "full" or (cfg.model.finetune == "auto" and cfg.model.name == "tiny")
    if full:
        return None
    return LoraSettings(r=cfg.model.lora_r, alpha=cfg.model.lora_alpha, dropout=cfg.model.lora_dropout)


def world_model_backbone(model: Any, policy_lora: Any) -> Any:
    """The backbone the world model is built on: the policy's architecture and initial weights.

    With a LoRA policy (``policy_lora`` set) the base weights never change, so the world model shares
    the same base model object and adds its own adapter. When the policy trains the base weights
    (``policy_lora=None``, full fine-tuning) the world model gets a deep copy of them, taken before any
    update, so the policy can never move the world model's scores through shared weights. The copy
    costs one more set of weights: 13 MB for ``tiny`` (3.3M float32 parameters), 538 MB for SmolLM2-135M.
    """
    return copy.deepcopy(model) if policy_lora is None else model


def make_executor(cfg: TrainConfig, log_path: Path) -> Any:
    """The executor of ``executor.kind``, logging every execution to the SQLite log at ``log_path`` (``remote``: a
    :class:`wmrl.serve.client.RemoteExecutor` on ``executor.url``, which logs there too, beside the service's own
    log), behind a :class:`wmrl.execution.cache.CachingExecutor` when ``executor.cache`` is on."""

    exlog = ExecutionLog(log_path)
    ex = _make_executor(cfg, exlog)
    return CachingExecutor(ex, exlog) if cfg.executor.cache else ex


def _make_executor(cfg: TrainConfig, exlog: ExecutionLog) -> Any:
    e = cfg.executor
    if e.kind == "remote":
        from wmrl.serve.client import RemoteExecutor, token_from_env  # noqa: PLC0415 - optional dependency (httpx)

        assert e.url is not None  # the config's validator requires it
        return RemoteExecutor(e.url, token_from_env(e.token_env), max_workers=e.workers, log=exlog)
    sandbox = sandbox_config(cfg)
    if e.kind == "ray":
        ex = RayExecutor(address=e.address, max_workers=e.workers, sandbox=sandbox, log=exlog)
        ex.recheck_infra = e.recheck_infra_errors
        return ex

    return LocalExecutor(max_workers=e.workers, sandbox=sandbox, log=exlog, recheck_infra=e.recheck_infra_errors)


def build_components(cfg: TrainConfig, rd: RunDir, ledger: Ledger, *, resume: bool = False) -> Any:
    """Tasks, scaffold, policy, executor and (for ``wm``/``wmrl``) the world model.

    The world model is, in order: the one in ``rd/world_model`` (a resumed run), the pre-fitted one at
    ``world_model.path`` (copied into the run), or one fitted now on a warm-up corpus (collected with
    the initial policy and executed for real; timed as the ``warmup`` and ``wm_fit`` phases).
    """

    def warn(line: str) -> None:  # a refused task: on stderr and in train.log
        log.warning("%s", line)
        rd.log_line(f"{now_iso()} {line}")

    train, heldout = resolve_tasks(cfg, warn=warn)
    record_tasks(rd, cfg, train, heldout)
    scaffold = get_scaffold(cfg.scaffold.name or DEFAULT_SCAFFOLD)
    check_isolation(getattr(scaffold, "name", str(cfg.scaffold.name)), sandbox_config(cfg), train + heldout)
    check_outputs_fit(scaffold, train + heldout)
    model, tok = load_policy_backbone(cfg)
    lora = policy_lora(cfg)
    uses_wm = get_recipe(cfg.method).uses_world_model
    served_wm = bool(cfg.world_model.url)
    wm_backbone = world_model_backbone(model, lora) if uses_wm and not served_wm else None
    policy = Policy(model, tok, lora=lora)
    policy.sampling_engine = cfg.rollout.engine
    need = policy.min_new_tokens(scaffold, train + heldout)
    if cfg.rollout.max_new_tokens < need:
        raise ConfigError(f"rollout.max_new_tokens={cfg.rollout.max_new_tokens} is shorter than the longest program "
                          f"of the {scaffold.name!r} scaffold ({need} tokens with EOS for this tokenizer): set it to "
                          f"at least {need}")
    executor = make_executor(cfg, rd.executions)
    comps = Components(train_tasks=train, heldout_tasks=heldout, scaffold=scaffold, policy=policy,
                       executor=executor, close=executor.close)
    if cfg.executor.kind == "remote":
        check_served_tasks(executor, train + heldout, executor.close)
    if uses_wm and served_wm:
        comps.world_model = wm = served_world_model(cfg, executor.close)
        comps.executed_records = lambda: executed_records(cfg, rd)  # recalled executions: the run's own anchors

        def close_both() -> None:
            executor.close()
            wm.close()

        comps.close = close_both
    elif uses_wm:
        try:
            comps.world_model = _world_model(cfg, rd, ledger, wm_backbone, tok, policy, scaffold, train, executor)
        except BaseException:
            executor.close()
            raise
        # every K steps (world_model.refresh_every_k), and when the exploitation alarm asks for a refit
        comps.refit_world_model = lambda step: refit_world_model(cfg, rd, comps.world_model)
        comps.executed_records = lambda: executed_records(cfg, rd)
    return comps


def check_served_tasks(executor: Any, tasks: list[Any], close: Callable[[], None]) -> None:
    """Refuse to train when the sandbox service does not know every task (checked once, before any step).

    Raises:
        ConfigError: naming the missing tasks, or the service that cannot be reached (``close`` is called first).
    """
    from wmrl.serve.client import ServiceError  # noqa: PLC0415 - optional dependency (httpx)

    try:
        executor.check_tasks([t.id for t in tasks])
    except (ValueError, ServiceError) as e:
        close()
        raise ConfigError(f"executor.url: {e}") from None


def served_world_model(cfg: TrainConfig, close: Callable[[], None]) -> Any:
    """The :class:`wmrl.serve.client.RemoteWorldModel` of ``world_model.url``, checked to answer ``/v1/health`` as a
    world-model service.

    Raises:
        ConfigError: the service cannot be reached or is not a world-model service (``close`` is called first).
    """
    from wmrl.serve.client import RemoteWorldModel, ServiceError, token_from_env  # noqa: PLC0415 - optional (httpx)

    assert cfg.world_model.url is not None
    wm = RemoteWorldModel(cfg.world_model.url, token_from_env(cfg.world_model.token_env))
    try:
        service = wm.client.health().get("service")
    except ServiceError as e:
        close()
        raise ConfigError(f"world_model.url: {e}") from None
    if service != "world-model":
        close()
        raise ConfigError(f"world_model.url {cfg.world_model.url} is a {service!r} service, not `wmrl serve "
                          "world-model`")
    return wm


def _world_model(cfg: TrainConfig, rd: RunDir, ledger: Ledger, model: Any, tok: Any, policy: Any,
                 scaffold: Any, train: list[Any], executor: Any) -> Any:
    """The world model of kind ``world_model.kind`` (see :func:`build_components` for where it comes from)."""

    wmc = cfg.world_model
    if (rd.world_model / "DONE").is_file():
        return load_world_model(rd.world_model, model, tok, kind=wmc.kind)
    if wmc.path:
        src = Path(wmc.path)
        if not src.is_dir():
            raise FileNotFoundError(f"world_model.path {src} is not a folder (fit one with `wmrl wm fit`)")
        try:
            wm = load_world_model(src, model, tok, kind=wmc.kind)
        except ValueError as e:
            raise ConfigError(f"world_model.path: {e}") from e
        check_saved_settings(wm.config(), cfg, src)
        _save_wm(wm, rd)
        return wm
    records = warmup_records(cfg, rd, ledger, policy, scaffold, train, executor)
    rewarded = [r for r in records if r.get("reward") is not None and math.isfinite(float(r["reward"]))]
    if len(rewarded) < 2:
        raise RuntimeError(warmup_failure_message(records, len(rewarded), rd.executions))
    records = rewarded
    with ledger.phase("wm_fit"):
        wm = new_world_model(wmc.kind, model, tok, **world_model_settings(cfg))
        fit = _fit(wm, records, cfg)
    _save_wm(wm, rd)
    write_json_atomic(rd.root / "world_model_fit.json", {"phase": "initial", **fit})
    return wm


def check_saved_settings(saved: dict[str, Any], cfg: TrainConfig, src: Path | str) -> None:
    """Refuse a saved world model (``world_model.path``) whose settings differ from those ``cfg`` would build
    (:func:`world_model_settings`): ``program_features``, ``residual_neighbours`` and, where both use neighbours,
    ``neighbours_own_program``. The loaded model's settings are the ones it predicts with, so a config that asks
    for others would be silently without effect.

    Args:
        saved: the loaded world model's ``config()`` (keys a kind does not have are not compared).
        cfg: the run's config.
        src: the folder, for the message.

    Raises:
        ConfigError: which settings differ, the folder's values and the config's, and what to set.
    """
    want = {"program_features": 0, "residual_neighbours": 0, **world_model_settings(cfg)}
    keys = {"program_features": "world_model.program_features",
            "residual_neighbours": "world_model.residual_neighbours"}
    if saved.get("residual_neighbours") and want["residual_neighbours"]:
        keys["neighbours_own_program"] = "neighbours_own_program (set by the method: true where it recalls)"
    diff = [f"{name}: the folder's model has {saved[k]!r}, this config asks for {want[k]!r}"
            for k, name in keys.items() if k in saved and saved[k] != want[k]]
    if diff:
        raise ConfigError(f"world_model.path {src} was fitted with other settings ({'; '.join(diff)}): set the "
                          "config to the folder's values, or leave world_model.path unset so that the run fits a "
                          "world model with these")


def world_model_settings(cfg: TrainConfig) -> dict[str, Any]:
    """The constructor settings of a new world model of kind ``world_model.kind`` from ``cfg``: ``lora`` (None
    without an adapter), ``max_length``, and those of its kind that are set (``program_features``,
    ``residual_neighbours`` with ``neighbours_own_program`` false under a method without recall, so that such a
    method never uses a program's own execution; the generative kind's ``ladder``)."""
    wmc = cfg.world_model
    out: dict[str, Any] = {"lora": LoraSettings(r=wmc.lora_r, alpha=2 * wmc.lora_r) if wmc.adapter else None,
                           "max_length": wmc.max_length}
    out.update({k: getattr(wmc, k) for k in ("program_features", "residual_neighbours") if getattr(wmc, k)})
    if wmc.residual_neighbours:
        out["neighbours_own_program"] = get_recipe(cfg.method).recall
    if wmc.kind == "generative":
        out["ladder"] = wmc.ladder
    return out


def warmup_failure_message(records: list[dict[str, Any]], n_rewarded: int, log_path: Path) -> str:
    """Why the world model cannot be fitted: the counts by status and the executions' own first (up to
    two distinct) error messages, so an executor or sandbox failure shows its cause."""
    counts = Counter(str(r.get("status")) for r in records)
    by_status = ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    errors: list[str] = []
    for r in records:
        e = " ".join(str(r.get("error") or "").split())
        if e and e not in errors:
            errors.append(e)
        if len(errors) == 2:
            break
    msg = (f"the warm-up corpus has {n_rewarded} executions with a reward (of {len(records)}; by status: "
           f"{by_status or 'none'}): the world model cannot be fitted.")
    if errors:
        msg += " Errors: " + "; ".join(repr(e[:300]) for e in errors) + "."
    rewardless_ok = sum(1 for r in records if r.get("status") == "ok" and r.get("reward") is None)
    if rewardless_ok:
        msg += f" {rewardless_ok} ok executions have no reward: do their tasks have leaderboards?"
    return msg + f" Every execution is in {log_path}"


def _fit(wm: Any, records: list[Any], cfg: TrainConfig) -> dict[str, Any]:
    """``wm.fit`` with the config's settings (``head_lr`` only for a world model with a head)."""
    wmc = cfg.world_model
    extra = {"head_lr": wmc.head_lr} if getattr(wm, "kind", "regression") == "regression" else {}
    return wm.fit(records, epochs=wmc.fit_epochs, lr=wmc.fit_lr, batch_size=wmc.batch_size,
                  heldout_fraction=wmc.heldout_fraction, seed=cfg.seed, time_budget_s=wmc.fit_time_budget_s,
                  **extra)


def _save_wm(wm: Any, rd: RunDir) -> None:
    tmp = rd.world_model.with_name("world_model.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    wm.save(tmp)
    (tmp / "DONE").write_text("ok\n")
    if rd.world_model.exists():
        shutil.rmtree(rd.world_model)
    tmp.rename(rd.world_model)


def warmup_records(cfg: TrainConfig, rd: RunDir, ledger: Ledger, policy: Any, scaffold: Any, train: list[Any],
                   executor: Any) -> list[dict[str, Any]]:
    """The warm-up corpus: ``warmup_samples_per_task`` programs per train task sampled from the initial
    policy and executed for real (:func:`wmrl.models.corpus.collect_warmup`: sampling of the next tasks
    overlaps executions of the previous ones), or read from ``world_model.warmup_corpus`` (an execution log).

    Cost goes to the ledger (phase ``warmup``; executions ``warmup``). Returns execution-log-style
    records (``task_id``, ``status``, ``reward``, ``meta`` with ``prompt``, ``completion``,
    ``group_id``, ``stream="warmup"``) for the world model's ``fit``.
    """


    wmc = cfg.world_model
    with ledger.phase("warmup"):
        if wmc.warmup_corpus:
            return corpus_records(wmc.warmup_corpus)
        with torch.no_grad():
            records, results = collect_warmup(
                policy, scaffold, train, executor, samples_per_task=wmc.warmup_samples_per_task,
                max_new_tokens=cfg.rollout.max_new_tokens, temperature=cfg.rollout.temperature,
                top_p=cfg.rollout.top_p, seed=sampling_seed(cfg.seed, 0, 7) % (2**31),
                run=f"{cfg.name or cfg.method}-warmup")
        ledger.add_executions("warmup", results)
    return records


def collect_corpus(cfg: TrainConfig, log_path: Path, *, samples_per_task: int, group_size: int,
                   seed: int) -> dict[str, Any]:
    """A warm-up corpus collected once and shared by several runs (their ``world_model.warmup_corpus``).

    ``samples_per_task`` programs per train task of ``cfg`` are sampled from the initial policy of
    ``cfg`` seeded with ``seed`` (in groups of ``group_size``) and executed for real; every execution
    goes to the execution log at ``log_path`` with its trajectory in ``meta`` (as the trainer's own
    warm-up). Its cost is paid once, here, and returned so that whoever shares the corpus reports it.

    Returns:
        ``{executions, ok, sandbox_cpu_s, driver_cpu_s, compute_cpu_s, wall_s, samples_per_task,
        group_size, seed, tasks}``: CPU-seconds of the sandboxed programs and of this process
        (sampling, grading), their sum, and wall seconds.

    Raises:
        ConfigError: as :func:`resolve_tasks`; ValueError: ``group_size`` does not divide
            ``samples_per_task``.
    """



    train, _ = resolve_tasks(cfg)
    c = cfg.model_copy(update={"seed": seed})
    model, tok = load_policy_backbone(c)
    policy = Policy(model, tok, lora=policy_lora(c))
    policy.sampling_engine = c.rollout.engine
    executor = make_executor(c, log_path)
    w0, p0 = time.perf_counter(), time.process_time()
    try:
        with torch.no_grad():
            recs, results = collect_warmup(
                policy, get_scaffold(cfg.scaffold.name or DEFAULT_SCAFFOLD), train, executor,
                samples_per_task=samples_per_task, group_size=group_size,
                max_new_tokens=cfg.rollout.max_new_tokens, temperature=cfg.rollout.temperature,
                top_p=cfg.rollout.top_p, seed=seed, run="shared-corpus")
    finally:
        executor.close()
    sandbox = float(sum(float(r.cpu_s or 0.0) for r in results))
    driver = time.process_time() - p0
    return {"executions": len(results), "ok": sum(1 for r in recs if r["status"] == "ok"),
            "sandbox_cpu_s": sandbox, "driver_cpu_s": driver, "compute_cpu_s": sandbox + driver,
            "wall_s": time.perf_counter() - w0, "samples_per_task": samples_per_task, "group_size": group_size,
            "seed": seed, "tasks": [t.id for t in train]}


def corpus_records(path: str | Path) -> list[dict[str, Any]]:
    """The executed trajectories of an external warm-up corpus (an execution log written by
    ``wmrl wm warmup`` or a run): the records that hold a trajectory.

    Raises:
        FileNotFoundError: ``path`` is not a file (the message names ``world_model.warmup_corpus``).
    """

    src = Path(path)
    if not src.is_file():
        raise FileNotFoundError(f"world_model.warmup_corpus {src} does not exist")
    return [r for r in ExecutionLog(src).records() if r["trajectory"] is not None]


def executed_records(cfg: TrainConfig, rd: RunDir) -> list[dict[str, Any]]:
    """The run's executions so far as execution-log records: the warm-up, anchor and verification executions in
    the run's execution log, after the records of ``world_model.warmup_corpus`` when the warm-up was read from an
    external log (those are not copied into the run's log)."""

    recs = [r for r in ExecutionLog(rd.executions).records()
            if r["trajectory"] is not None and r["trajectory"].stream in ("warmup", "anchor", "verify")]
    if cfg.world_model.warmup_corpus:
        recs = corpus_records(cfg.world_model.warmup_corpus) + recs
    return recs


def refit_world_model(cfg: TrainConfig, rd: RunDir, wm: Any) -> dict[str, Any]:
    """Refit ``wm`` on the warm-up corpus plus every anchor execution so far (:func:`executed_records`)."""
    recs = executed_records(cfg, rd)
    stats = _fit(wm, recs, cfg)
    return {"n_records": len(recs), **{k: v for k, v in stats.items() if not isinstance(v, list)}}
