"""Commands of ``wmrl.world_model`` (``wmrl wm``). Imports of heavy libraries stay inside the commands.

* ``wmrl wm warmup``: sample the base policy on train tasks, execute everything, log it.
* ``wmrl wm fit``: fit a world model (``--kind regression``, ``generative`` or a registered kind) on an execution
  log; held-out metrics, predictions/s, PNG.
* ``wmrl wm eval``: metrics, the fidelity card (:mod:`wmrl.world_model.fidelity`) and predictions/s of a saved
  world model (any kind) on an execution log.
* ``wmrl wm bench``: sampling tokens/s, world-model predictions/s and real execution time of the
  same trajectories, side by side, with the world-model-to-execution cost ratio.

The option declarations and helpers are the LM commands' (:mod:`wmrl.models.cli`).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer

from wmrl.models.cli import (
    MaxNewTokensOpt,
    ModelOpt,
    SeedOpt,
    TasksDirOpt,
    TemperatureOpt,
    ThreadsOpt,
    WorkersOpt,
    fmt,
    load_backbone_or_exit,
    local_executor,
    start_command,
    train_tasks,
)
from wmrl.world_model.factory import WORLD_MODELS

wm_app = typer.Typer(help="World model: warm-up corpus, fitting, evaluation, throughput.", no_args_is_help=True)


def _registered_kind(kind: str) -> str:
    """``kind`` if it names a registered world-model kind, else a one-line ``--kind`` error."""
    try:
        return WORLD_MODELS.check(kind)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--kind") from None


KindOpt = Annotated[str, typer.Option(
    "--kind", callback=_registered_kind,
    help="World model: 'regression' (adapter + scalar head, MSE), 'generative' (adapter writes the score as text "
         "'0.DD'; prediction = expected value of the digit distributions) or a registered kind.")]


# ------------------------------------------------------------------------------------------ wm warmup


@wm_app.command("warmup")
def warmup_cmd(
    log: Path = typer.Option(..., "--log", help="Execution log (SQLite) to append the corpus to."),
    samples_per_task: int = typer.Option(8, "--samples-per-task", "-n", help="Trajectories per train task."),
    group_size: int = typer.Option(0, "--group-size", help="Trajectories per group, dividing --samples-per-task "
                                   "(0 = one group per task)."),
    tasks_per_batch: int = typer.Option(2, "--tasks-per-batch", help="Tasks sampled per generate call."),
    tasks: str | None = typer.Option(None, "--tasks", help="Comma-separated train task ids (default: all)."),
    tasks_dir: TasksDirOpt = None,
    model: ModelOpt = "smollm2-135m",
    scaffold: str | None = typer.Option(None, "--scaffold", help="Default: DEFAULT_SCAFFOLD."),
    max_new_tokens: MaxNewTokensOpt = None,
    temperature: TemperatureOpt = 1.0,
    workers: WorkersOpt = 2,
    seed: SeedOpt = 0,
    run: str = typer.Option("warmup", "--run", help="Corpus name stored in meta.run."),
    threads: ThreadsOpt = 1,
) -> None:
    """Sample the base policy on the train tasks, execute everything, store it in the execution log."""
    console = start_command(threads)

    from wmrl.models.policy import Policy
    from wmrl.models.scaffolds import DEFAULT_SCAFFOLD
    from wmrl.models.corpus import collect_warmup

    task_list = train_tasks(tasks, tasks_dir)
    m, tok = load_backbone_or_exit(model, seed)
    policy = Policy(m, tok)
    executor = local_executor(workers, log)
    try:
        recs, _ = collect_warmup(policy, scaffold or DEFAULT_SCAFFOLD, task_list, executor,
                                 samples_per_task=samples_per_task, max_new_tokens=max_new_tokens,
                                 temperature=temperature, seed=seed, run=run, group_size=group_size or None,
                                 tasks_per_batch=tasks_per_batch,
                                 progress=lambda s: console.print(s))
    finally:
        executor.close()
    ok = [r for r in recs if r["status"] == "ok"]
    rewards = [r["reward"] for r in recs if r["reward"] is not None and math.isfinite(r["reward"])]
    console.print(f"warm-up corpus: {len(recs)} trajectories on {len(task_list)} tasks, {len(ok)} ok, "
                  f"mean reward {fmt(sum(rewards) / len(rewards) if rewards else float('nan'))}, "
                  f"execution wall {sum(r['wall_s'] for r in recs):.0f} s, CPU {sum(r['cpu_s'] for r in recs):.0f} s "
                  f"-> {log}")


# ------------------------------------------------------------------------------------------ wm fit / eval


def _print_metrics(console: Any, title: str, m: dict[str, Any]) -> None:
    from rich.table import Table

    t = Table(title=title)
    for c in ("n", "MAE", "RMSE", "bias", "Spearman", "Pearson", "pairwise acc. (in groups)", "pairs", "residual std"):
        t.add_column(c)
    t.add_row(str(m["n"]), fmt(m["mae"]), fmt(m["rmse"]), fmt(m["bias"]), fmt(m["spearman"]), fmt(m["pearson"]),
              fmt(m["pairwise_accuracy"]), str(m["n_pairs"]), fmt(m["residual_std"]))
    console.print(t)
    d = Table(title="bias by decile of the prediction")
    for c in ("decile", "n", "pred range", "mean pred", "mean true", "bias"):
        d.add_column(c)
    for b in m["bias_by_decile"]:
        d.add_row(str(b["bin"] + 1), str(b["n"]), f"{b['pred_lo']:.3f}-{b['pred_hi']:.3f}", fmt(b["pred_mean"]),
                  fmt(b["true_mean"]), f"{b['bias']:+.3f}")
    console.print(d)


@wm_app.command("fit")
def fit_cmd(
    log: Path = typer.Option(..., "--log", help="Execution log (SQLite) with executed trajectories."),
    out: Path = typer.Option(..., "--out", help="Folder for the fitted world model, metrics.json, calibration.png."),
    model: ModelOpt = "smollm2-135m",
    epochs: int = typer.Option(2, "--epochs"),
    lr: float = typer.Option(3e-4, "--lr", help="LoRA learning rate."),
    head_lr: float = typer.Option(1e-5, "--head-lr", help="AdamW learning rate of the head in the LoRA stage "
                                  "(regression only)."),
    batch_size: int = typer.Option(8, "--batch-size"),
    heldout_fraction: float = typer.Option(0.25, "--heldout-fraction", help="Fraction of groups held out."),
    lora_r: int = typer.Option(8, "--lora-r", help="LoRA rank; 0 = frozen backbone, head only (regression only)."),
    max_length: int = typer.Option(320, "--max-length", help="Tokens per input (left-truncated)."),
    time_budget: float | None = typer.Option(None, "--time-budget", help="Stop training after this many seconds."),
    seed: SeedOpt = 0,
    stream: str | None = typer.Option(None, "--stream", help="Only rows with this meta.stream (e.g. warmup)."),
    kind: KindOpt = "regression",
    program_features: int = typer.Option(0, "--program-features", min=0, help=(
        "Regression kind: P hashed program-choice features beside the backbone's (a run's "
        "world_model.program_features; 0 = none).")),
    residual_neighbours: int = typer.Option(0, "--residual-neighbours", min=0, help=(
        "Regression kind: correct each prediction by the residual of the K nearest executed programs of its prompt "
        "(a run's world_model.residual_neighbours; 0 = none).")),
    own_program: bool = typer.Option(True, "--neighbours-own-program/--neighbours-other-programs", help=(
        "With --residual-neighbours: whether a program's own executions count among its neighbours; a run of a "
        "method without recall (wmrl-no-recall) loads only a model fitted with --neighbours-other-programs.")),
    threads: ThreadsOpt = 1,
) -> None:
    """Fit a world model on executed trajectories; print held-out metrics and predictions/s, write a PNG.

    The saved folder is what a run's ``world_model.path`` loads; its ``program_features`` and
    ``residual_neighbours`` must then be the run's config's (the run refuses others)."""
    console = start_command(threads)
    import torch

    from wmrl.execution.log import ExecutionLog
    from wmrl.models.types import LoraSettings
    from wmrl.world_model.factory import new_world_model
    from wmrl.world_model.metrics import calibration_plot

    if kind == "generative" and (program_features or residual_neighbours):
        raise typer.BadParameter("--program-features and --residual-neighbours feed the regression head; the "
                                 "generative world model has none: leave them at 0 or use --kind regression",
                                 param_hint="--kind")
    if not own_program and not residual_neighbours:
        raise typer.BadParameter("--neighbours-other-programs chooses which executions the residual neighbours use: "
                                 "give --residual-neighbours K too (e.g. 8)", param_hint="--neighbours-other-programs")
    if kind == "generative" and lora_r < 1:
        raise typer.BadParameter("the generative world model learns only through its adapter: give --lora-r >= 1",
                                 param_hint="--lora-r")
    if not log.is_file():
        raise typer.BadParameter(f"{log} does not exist; collect a corpus with 'wmrl wm warmup --log {log}'",
                                 param_hint="--log")
    records = ExecutionLog(log).records()
    if stream:
        records = [r for r in records if r["trajectory"] is not None and r["trajectory"].stream == stream]
    torch.manual_seed(seed)
    m, tok = load_backbone_or_exit(model, seed)
    lora = LoraSettings(r=lora_r, alpha=2 * lora_r) if lora_r > 0 else None
    settings: dict[str, Any] = {}
    if program_features:
        settings["program_features"] = program_features
    if residual_neighbours:
        settings.update(residual_neighbours=residual_neighbours, neighbours_own_program=own_program)
    wm = new_world_model(kind, m, tok, lora=lora, max_length=max_length, **settings)
    console.print(f"fitting the {kind} world model on {len(records)} log rows from {log} ...")
    res = wm.fit(records, epochs=epochs, lr=lr, batch_size=batch_size, heldout_fraction=heldout_fraction, seed=seed,
                 log_every=10, time_budget_s=time_budget, **({"head_lr": head_lr} if kind == "regression" else {}))
    res["kind"] = kind
    wm.save(out)
    console.print(f"trained on {res['n_train']} trajectories ({res['steps']} steps, {res['train_seconds']:.0f} s), "
                  f"held out {res['n_heldout']}; skipped {res['skipped']}")
    console.print(f"prediction: {res['n_train'] + res['n_heldout']} trajectories in {res['predict_seconds']:.1f} s "
                  f"({res['predictions_per_s']:.2f} predictions/s)")
    _print_metrics(console, "train metrics", res["train"])
    if "heldout" in res:
        _print_metrics(console, "held-out metrics", res["heldout"])
        png = calibration_plot(res["heldout_pred"], res["heldout_true"], out / "calibration.png",
                               title=f"World model calibration (held out, n={res['n_heldout']})")
        console.print(f"calibration plot: {png}")
    (out / "metrics.json").write_text(json.dumps(res, indent=2, default=str))
    console.print(f"world model saved to {out}")


def _examples_with_classes(records: list[dict[str, Any]]) -> tuple[list[Any], list[str | None], dict[str, int]]:
    """The world-model examples of execution-log ``records`` (:func:`wmrl.world_model.data.examples_from_records`),
    the true outcome class of each (its ``status``) and the skip counts."""
    from wmrl.world_model.data import examples_from_records

    examples, counts = examples_from_records(records)
    return examples, [e["status"] for e in examples], counts


@wm_app.command("eval")
def eval_cmd(
    wm_dir: Path = typer.Option(..., "--wm", help="A world model folder written by 'wmrl wm fit'."),
    log: Path = typer.Option(..., "--log", help="Execution log with executed trajectories."),
    model: ModelOpt = "smollm2-135m",
    png: Path | None = typer.Option(None, "--png", help="Write a calibration plot here."),
    json_out: Path | None = typer.Option(None, "--json", help="Write the fidelity card (every figure with its "
                                            "95% interval, counts, status mixes) here as JSON."),
    n_boot: int = typer.Option(1000, "--boot", min=0, help="Bootstrap resamples (whole groups) of the fidelity "
                               "card's intervals; 0 = point values only."),
    seed: SeedOpt = 0,
    threads: ThreadsOpt = 1,
) -> None:
    """Metrics, fidelity card and prediction speed of a saved world model (either kind) on every usable trajectory
    of a log (docs/models.md, "The fidelity card")."""
    console = start_command(threads)
    import time

    import numpy as np

    from wmrl.execution.log import ExecutionLog
    from wmrl.world_model.factory import load_world_model
    from wmrl.world_model.fidelity import fidelity_card, format_card
    from wmrl.world_model.metrics import calibration_plot, world_model_metrics

    if not log.is_file():
        raise typer.BadParameter(f"{log} does not exist", param_hint="--log")
    examples, classes, counts = _examples_with_classes(ExecutionLog(log).records())
    if not examples:
        raise typer.BadParameter(f"no usable trajectory in {log} ({counts})", param_hint="--log")
    m, tok = load_backbone_or_exit(model)
    try:
        wm = load_world_model(wm_dir, m, tok)
    except FileNotFoundError as e:
        raise typer.BadParameter(str(e), param_hint="--wm") from None
    prompts, completions = [e["prompt"] for e in examples], [e["completion"] for e in examples]
    t0 = time.perf_counter()
    # a world model without status probabilities (no predict_outcome) gets the reward figures only
    outcome = wm.predict_outcome(prompts, completions) if hasattr(wm, "predict_outcome") else None
    pred = outcome.reward if outcome is not None else np.asarray(wm.predict(prompts, completions), dtype=np.float64)
    dt = time.perf_counter() - t0
    true = np.array([e["reward"] for e in examples])
    groups = [e["group"] for e in examples]
    console.print(f"{wm.kind} world model: {len(examples)} predictions in {dt:.1f} s ({len(examples) / dt:.2f} "
                  "predictions/s)")
    skipped = {k: v for k, v in counts.items() if k != "used" and v}
    if skipped:
        console.print(f"log rows left out: {skipped}")
    _print_metrics(console, f"world model {wm_dir} on {log}", world_model_metrics(pred, true, groups))
    card = fidelity_card(outcome if outcome is not None else pred, true, classes, groups, n_boot=n_boot, seed=seed)
    console.print(format_card(card), markup=False, highlight=False)
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(card.to_dict(), indent=2))
        console.print(f"fidelity card: {json_out}")
    if png:
        console.print(f"calibration plot: {calibration_plot(pred, true, png)}")


# ------------------------------------------------------------------------------------------ wm bench


@wm_app.command("bench")
def bench_cmd(
    model: ModelOpt = "smollm2-135m",
    tasks: str | None = typer.Option(None, "--tasks", help="Comma-separated train task ids (default: the 2 smallest)."),
    tasks_dir: TasksDirOpt = None,
    samples: int = typer.Option(4, "--samples", "-n", help="Trajectories per task."),
    scaffold: str | None = typer.Option(None, "--scaffold", help="Default: DEFAULT_SCAFFOLD."),
    wm_dir: Path | None = typer.Option(None, "--wm",
                                       help="A fitted world model of either kind (default: a fresh regression one)."),
    workers: WorkersOpt = 2,
    seed: SeedOpt = 0,
    json_out: Path | None = typer.Option(None, "--json"),
    threads: ThreadsOpt = 1,
) -> None:
    """Policy sampling, world-model prediction and real execution of the same trajectories, side by side."""
    console = start_command(threads)
    import time

    from rich.table import Table

    from wmrl.execution.pool import result_or_infra
    from wmrl.execution.types import ExecutionRequest
    from wmrl.models.policy import Policy
    from wmrl.models.scaffolds import DEFAULT_SCAFFOLD, get_scaffold
    from wmrl.world_model.factory import load_world_model
    from wmrl.world_model.regression import RegressionWorldModel

    task_list = train_tasks(tasks, tasks_dir)
    if not tasks:  # the two smallest train tasks: a short run
        task_list = sorted(task_list, key=lambda t: (t.n_rows or 0, t.id))[:2]
    sc = get_scaffold(scaffold or DEFAULT_SCAFFOLD)
    m, tok = load_backbone_or_exit(model, seed)
    policy = Policy(m, tok)
    wm = load_world_model(wm_dir, m, tok) if wm_dir else RegressionWorldModel(m, tok)

    c0, t0 = time.process_time(), time.perf_counter()
    batch = policy.sample(task_list, sc, group_size=samples, generator_seed=seed)
    gen_wall, gen_cpu = time.perf_counter() - t0, time.process_time() - c0
    n = len(batch)
    new_tokens = int(batch.completion_mask.sum())

    wm.predict(batch.prompts[:1], batch.completions[:1])  # warm-up (first-call allocations)
    c0, t0 = time.process_time(), time.perf_counter()
    wm.predict(batch.prompts, batch.completions)
    wm_wall, wm_cpu = time.perf_counter() - t0, time.process_time() - c0

    by_id = {t.id: t for t in task_list}
    executor = local_executor(workers, None)
    try:
        t0 = time.perf_counter()
        reqs = [ExecutionRequest(task=by_id[tid], program=p, request_id=f"bench-{i}")
                for i, (tid, p) in enumerate(zip(batch.task_ids, batch.programs))]
        futs = [executor.submit(r) for r in reqs]
        results = [result_or_infra(f, r) for f, r in zip(futs, reqs)]
        ex_wall = time.perf_counter() - t0
    finally:
        executor.close()
    ex_sum_wall = sum(r.wall_s for r in results)
    ex_cpu = sum(r.cpu_s for r in results)
    statuses: dict[str, int] = {}
    for r in results:
        k = getattr(r.status, "value", r.status)
        statuses[k] = statuses.get(k, 0) + 1

    res: dict[str, Any] = {
        "model": model, "scaffold": sc.name, "trajectories": n, "tasks": [t.id for t in task_list],
        "sampling": {"wall_s": gen_wall, "cpu_s": gen_cpu, "new_tokens": new_tokens,
                     "tokens_per_s": new_tokens / gen_wall, "trajectories_per_s": n / gen_wall},
        "world_model": {"wall_s": wm_wall, "cpu_s": wm_cpu, "predictions_per_s": n / wm_wall,
                        "wall_s_per_trajectory": wm_wall / n, "cpu_s_per_trajectory": wm_cpu / n},
        "execution": {"batch_wall_s": ex_wall, "workers": workers, "sum_wall_s": ex_sum_wall, "cpu_s": ex_cpu,
                      "wall_s_per_trajectory": ex_sum_wall / n, "cpu_s_per_trajectory": ex_cpu / n,
                      "statuses": statuses},
    }
    wm_res, ex_res = res["world_model"], res["execution"]
    res["ratio_wm_to_execution_wall"] = wm_res["wall_s_per_trajectory"] / max(ex_res["wall_s_per_trajectory"], 1e-9)
    res["ratio_wm_to_execution_cpu"] = wm_res["cpu_s_per_trajectory"] / max(ex_res["cpu_s_per_trajectory"], 1e-9)

    t = Table(title=f"Throughput on the local machine: {n} trajectories ({model}, scaffold {sc.name}, "
                    f"{len(task_list)} tasks x {samples})")
    for c in ("stage", "wall s (batch)", "per trajectory (wall s)", "per trajectory (CPU s)", "throughput"):
        t.add_column(c)
    t.add_row("policy sampling", fmt(gen_wall, 2), fmt(gen_wall / n, 3), fmt(gen_cpu / n, 3),
              f"{new_tokens / gen_wall:.1f} tokens/s ({new_tokens} tokens)")
    t.add_row("world-model prediction", fmt(wm_wall, 2), fmt(wm_wall / n, 3), fmt(wm_cpu / n, 3),
              f"{n / wm_wall:.2f} predictions/s")
    t.add_row(f"real execution ({workers} workers)", fmt(ex_wall, 2), fmt(ex_sum_wall / n, 3), fmt(ex_cpu / n, 3),
              f"{n / ex_wall:.2f} executions/s; " + ", ".join(f"{k}={v}" for k, v in statuses.items()))
    console.print(t)
    console.print(f"world model / execution cost per trajectory: wall {res['ratio_wm_to_execution_wall']:.3f}, "
                  f"CPU {res['ratio_wm_to_execution_cpu']:.3f} "
                  f"(execution is {1 / max(res['ratio_wm_to_execution_cpu'], 1e-9):.1f}x the world model's CPU cost)")
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(res, indent=2))


def register(app: typer.Typer) -> None:
    """Add ``wmrl wm`` to the top-level ``wmrl`` app."""
    app.add_typer(wm_app, name="wm")
