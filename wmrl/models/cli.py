"""Commands of ``wmrl.models``. Imports of heavy libraries stay inside the commands.

* ``wmrl scaffolds``: valid-program rate and status mix of each scaffold on the built-in train tasks
  (``--uniform``: programs drawn uniformly from each grammar, no LM).
* ``wmrl wm warmup``: sample the base policy on train tasks, execute everything, log it.
* ``wmrl wm fit``: fit a world model (``--kind regression`` or ``generative``) on an execution log;
  held-out metrics, predictions/s, PNG.
* ``wmrl wm eval``: metrics, the fidelity card (:mod:`wmrl.world_model.fidelity`) and predictions/s of a saved
  world model (either kind) on an execution log.
* ``wmrl wm bench``: sampling tokens/s, world-model predictions/s and real execution time of the
  same trajectories, side by side, with the world-model-to-execution cost ratio.
* ``wmrl models bench``: the LM's tokens/s (sampling, scoring, update) with and without
  shared prompts, next to the FLOP bound measured in the same run (:mod:`wmrl.bench.lm`).

Why one file of about 630 lines: the package's commands share their option declarations and helpers;
the measurements themselves live in their modules.
"""
from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

wm_app = typer.Typer(help="World model: warm-up corpus, fitting, evaluation, throughput.", no_args_is_help=True)


# Options that several commands share (one declaration each).
ModelOpt = Annotated[str, typer.Option("--model", help=(
    "Backbone: smollm2-135m, tiny, an HF id or a folder (the policy's; a world model's must match the one it was "
    "fitted on)."))]
TasksDirOpt = Annotated[list[Path] | None, typer.Option(
    "--root", "--tasks-dir", help="Where tasks live (repeatable; searched recursively, any layout); default: the "
    "built-in suite, or $WMRL_TASKS_ROOT. The same option as `wmrl tasks list --root` and tasks.root.")]
TemperatureOpt = Annotated[float, typer.Option("--temperature", help="Sampling temperature.")]
WorkersOpt = Annotated[int, typer.Option("--workers", help="Concurrent sandboxed executions.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Random seed (sampling, splits, initialisation).")]
MaxNewTokensOpt = Annotated[int | None, typer.Option("--max-new-tokens", help="Override the scaffold's token budget.")]
KindOpt = Annotated[Literal["regression", "generative"], typer.Option(
    "--kind", help="World model: 'regression' (adapter + scalar head, MSE) or 'generative' (adapter writes the score "
                   "as text '0.DD'; prediction = expected value of the digit distributions).")]


# ------------------------------------------------------------------------------------------ helpers


def _quiet() -> None:
    """Silence library chatter (progress bars, deprecation warnings) in command output."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover
        pass


_THREADS_HELP = ("torch CPU threads (0 = torch's default). 1 is the default: with executions or other jobs "
                 "sharing the cores, 2 OpenMP threads made SmolLM2 decoding 15x slower on a loaded 2-core machine.")
ThreadsOpt = Annotated[int, typer.Option("--threads", help=_THREADS_HELP)]


def _set_threads(n: int) -> None:
    import torch

    if n > 0:
        torch.set_num_threads(n)


def _backbone(name: str, seed: int = 0) -> tuple[Any, Any]:
    from wmrl.models.backbone import load_backbone, tiny_backbone

    if name == "tiny":
        return tiny_backbone(seed=seed)
    try:
        return load_backbone(name)
    except (FileNotFoundError, OSError, ValueError) as e:
        raise typer.BadParameter(f"cannot load backbone {name!r}: {e}", param_hint="--model") from None


def _train_tasks(ids: str | None, tasks_dir: list[Path] | None, split: str = "train") -> list[Any]:
    from wmrl.tasks.loader import TaskSuite, default_suite

    suite = TaskSuite(tasks_dir) if tasks_dir else default_suite()
    if ids:
        wanted = [s.strip() for s in ids.split(",") if s.strip()]
        try:
            tasks = [suite.get(t) for t in wanted]
        except KeyError as e:
            raise typer.BadParameter(str(e).strip("'\""), param_hint="--tasks/--task") from None
        held = [t.id for t in tasks if t.split != split]
        if held and split == "train":
            raise typer.BadParameter(f"{held} are held-out tasks; the world model and the warm-up may only use "
                                     "train tasks", param_hint="--tasks")
        return tasks
    tasks = suite.tasks(split)  # type: ignore[arg-type]
    if not tasks:
        raise typer.BadParameter(f"the suite at {suite.root} has no {split} task", param_hint="--tasks")
    return tasks


def _mean(xs: list[Any]) -> float:
    """Mean of ``xs``; NaN when empty or when any value is None / NaN."""
    if not xs or any(x is None or (isinstance(x, float) and math.isnan(x)) for x in xs):
        return float("nan")
    return float(sum(xs) / len(xs))


def _start(threads: int) -> Any:
    """What every command does first: quiet libraries, set torch threads; returns a rich console,
    150 columns wide when the output is not a terminal (logs, docs)."""
    import sys

    from wmrl.console import make_console

    _quiet()
    _set_threads(threads)
    return make_console() if sys.stdout.isatty() else make_console(width=150)


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return "nan" if math.isnan(x) else f"{x:.{digits}f}"
    return str(x)


def _executor(workers: int, log_path: Path | None) -> Any:
    from wmrl.execution.log import ExecutionLog
    from wmrl.execution.pool import LocalExecutor

    return LocalExecutor(max_workers=workers, log=ExecutionLog(log_path) if log_path else None)


# ------------------------------------------------------------------------------------------ scaffolds


#: The program statuses whose shares ``wmrl scaffolds`` reports (an ``infra_error`` is counted apart: no share).
PROGRAM_STATUSES = ("ok", "invalid_submission", "runtime_error", "timeout", "memory_exceeded")


def status_shares(records: list[dict[str, Any]]) -> tuple[dict[str, float], int, int]:
    """The share of each of :data:`PROGRAM_STATUSES` among ``records`` (execution-log records), leaving
    ``infra_error`` out of the denominator.

    Returns:
        ``(shares, counted, infra)``: status -> share in [0, 1] (NaN when nothing was counted), the number
        of records counted and the number of ``infra_error`` records left out.
    """
    infra = sum(r["status"] == "infra_error" for r in records)
    counted = len(records) - infra
    shares = {s: (sum(r["status"] == s for r in records) / counted if counted else float("nan"))
              for s in PROGRAM_STATUSES}
    return shares, counted, infra


def scaffolds_cmd(
    samples: int = typer.Option(4, "--samples", "-n", help="Samples per train task and scaffold."),
    model: ModelOpt = "smollm2-135m",
    tasks: str | None = typer.Option(None, "--tasks", help="Comma-separated task ids (default: all train tasks)."),
    tasks_dir: TasksDirOpt = None,
    scaffold: list[str] | None = typer.Option(None, "--scaffold", help="Scaffolds to measure (repeatable; default "
                                                 "all, or every grammar scaffold with --uniform)."),
    uniform: bool = typer.Option(False, "--uniform", help="Draw the programs uniformly at random from each grammar "
                                 "scaffold's sentences (seeded by --seed) instead of sampling the LM: no model is "
                                 "loaded, and scaffolds without a grammar are refused."),
    max_new_tokens: MaxNewTokensOpt = None,
    temperature: TemperatureOpt = 1.0,
    workers: WorkersOpt = 2,
    seed: SeedOpt = 0,
    log: Path | None = typer.Option(None, "--log", help="Also store every execution in this SQLite log."),
    json_out: Path | None = typer.Option(None, "--json", help="Write the measured rates as JSON here."),
    threads: ThreadsOpt = 1,
) -> None:
    """Valid-program rate and status mix of each scaffold on the built-in train tasks (sampled, then executed).

    Each status's share (ok, invalid_submission, runtime_error, timeout, memory_exceeded) is over the
    programs that ran (``infra_error`` left out and counted apart).
    """
    console = _start(threads)
    from rich.table import Table

    from wmrl.models.scaffolds import DEFAULT_SCAFFOLD, SCAFFOLDS, get_scaffold
    from wmrl.world_model.corpus import collect_uniform, collect_warmup

    unknown = [n for n in scaffold or [] if n not in SCAFFOLDS.names()]
    if unknown:
        raise typer.BadParameter(f"unknown scaffold(s) {unknown}; choose from {', '.join(SCAFFOLDS.names())}",
                                 param_hint="--scaffold")
    task_list = _train_tasks(tasks, tasks_dir)
    policy = None
    if uniform:
        def has_grammar(n: str) -> bool:
            return get_scaffold(n).grammar_key(task_list[0]) is not None

        names = list(scaffold or [n for n in SCAFFOLDS.names() if has_grammar(n)])
        free = [n for n in names if not has_grammar(n)]
        if free:
            raise typer.BadParameter(f"{free} have no grammar to draw from uniformly; measure them without --uniform "
                                     "(the LM samples them)", param_hint="--scaffold/--uniform")
    else:
        from wmrl.models.policy import Policy

        names = list(scaffold or SCAFFOLDS.names())
        m, tok = _backbone(model, seed)
        policy = Policy(m, tok)
    sampler = "uniform" if uniform else model
    rows: list[dict[str, Any]] = []
    executor = _executor(workers, log)
    try:
        for name in names:
            sc = get_scaffold(name)
            verb = "drawing" if uniform else "sampling"
            console.print(f"[bold]{name}[/]: {verb} {samples} x {len(task_list)} tasks ...")
            say = lambda s: console.print("  " + s)  # noqa: E731
            if uniform:
                recs, _ = collect_uniform(sc, task_list, executor, samples_per_task=samples, seed=seed,
                                          run=f"scaffolds-{name}-uniform", progress=say)
            else:
                recs, _ = collect_warmup(policy, sc, task_list, executor, samples_per_task=samples,
                                         max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
                                         run=f"scaffolds-{name}", progress=say)
            n = len(recs)
            ok = [r for r in recs if r["status"] == "ok"]
            shares, counted, infra = status_shares(recs)
            rewards = [r["reward"] for r in ok if r["reward"] is not None and math.isfinite(r["reward"])]
            gen = [r["trajectory"].gen_seconds_per_sample for r in recs]
            per_task: dict[str, dict[str, int]] = {}
            for r in recs:
                per_task.setdefault(r["task_id"], {}).setdefault(r["status"], 0)
                per_task[r["task_id"]][r["status"]] += 1
            rows.append({
                "scaffold": name,
                "samples": n,
                "well_formed": sum(bool(r["trajectory"].well_formed) for r in recs) / n if n else float("nan"),
                "valid_program_rate": shares["ok"],
                "status_shares": shares,
                "infra_errors": infra,
                # program failures get the failure reward (0); NaN when a task has no leaderboard
                "mean_reward_valid": sum(rewards) / len(rewards) if rewards else float("nan"),
                "mean_reward_all": _mean([r["reward"] for r in recs if r["status"] != "infra_error"]),
                # None for uniform draws (no LM)
                "gen_s_per_sample": (sum(gen) / n if n and all(g is not None for g in gen) else
                                     None if n else float("nan")),
                "exec_s_per_sample": sum(r["wall_s"] for r in recs) / n if n else float("nan"),
                "statuses": {s: sum(r["status"] == s for r in recs) for s in sorted({r["status"] for r in recs})},
                "per_task": per_task,
            })
    finally:
        executor.close()
    best = max(rows, key=lambda r: (-1 if math.isnan(r["valid_program_rate"]) else r["valid_program_rate"]))
    how = "drawn uniformly from each grammar" if uniform else f"{model}"
    table = Table(title=f"Status mix per scaffold ({how}, {len(task_list)} train tasks, {samples} samples each; "
                        "shares of the programs that ran)")
    for col in ("scaffold", "samples", "well-formed", "ok (valid)", "invalid sub.", "runtime err.", "timeout",
                "memory", "infra (count)", "mean reward (all)", "gen s/sample", "exec s/sample"):
        table.add_column(col)
    for r in rows:
        mark = " (default)" if r["scaffold"] == DEFAULT_SCAFFOLD else ""
        table.add_row(r["scaffold"] + mark, str(r["samples"]), _fmt(r["well_formed"]),
                      *(_fmt(r["status_shares"][s]) for s in PROGRAM_STATUSES), str(r["infra_errors"]),
                      _fmt(r["mean_reward_all"]), _fmt(r["gen_s_per_sample"], 2), _fmt(r["exec_s_per_sample"], 2))
    console.print(table)
    console.print(f"Highest valid-program rate: [bold]{best['scaffold']}[/] ({_fmt(best['valid_program_rate'])}); "
                  f"DEFAULT_SCAFFOLD = {DEFAULT_SCAFFOLD!r}"
                  + ("" if uniform or best["scaffold"] == DEFAULT_SCAFFOLD or len(rows) < len(SCAFFOLDS.names())
                     else "  [yellow](the measurement disagrees with the default for this model)[/]"))
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps({"model": None if uniform else model, "sampler": sampler, "seed": seed,
                                        "tasks": [t.id for t in task_list], "samples": samples,
                                        "default": DEFAULT_SCAFFOLD, "best": best["scaffold"], "rows": rows}, indent=2))


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
    console = _start(threads)

    from wmrl.models.policy import Policy
    from wmrl.models.scaffolds import DEFAULT_SCAFFOLD
    from wmrl.world_model.corpus import collect_warmup

    task_list = _train_tasks(tasks, tasks_dir)
    m, tok = _backbone(model, seed)
    policy = Policy(m, tok)
    executor = _executor(workers, log)
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
                  f"mean reward {_fmt(sum(rewards) / len(rewards) if rewards else float('nan'))}, "
                  f"execution wall {sum(r['wall_s'] for r in recs):.0f} s, CPU {sum(r['cpu_s'] for r in recs):.0f} s "
                  f"-> {log}")


# ------------------------------------------------------------------------------------------ wm fit / eval


def _print_metrics(console: Any, title: str, m: dict[str, Any]) -> None:
    from rich.table import Table

    t = Table(title=title)
    for c in ("n", "MAE", "RMSE", "bias", "Spearman", "Pearson", "pairwise acc. (in groups)", "pairs", "residual std"):
        t.add_column(c)
    t.add_row(str(m["n"]), _fmt(m["mae"]), _fmt(m["rmse"]), _fmt(m["bias"]), _fmt(m["spearman"]), _fmt(m["pearson"]),
              _fmt(m["pairwise_accuracy"]), str(m["n_pairs"]), _fmt(m["residual_std"]))
    console.print(t)
    d = Table(title="bias by decile of the prediction")
    for c in ("decile", "n", "pred range", "mean pred", "mean true", "bias"):
        d.add_column(c)
    for b in m["bias_by_decile"]:
        d.add_row(str(b["bin"] + 1), str(b["n"]), f"{b['pred_lo']:.3f}-{b['pred_hi']:.3f}", _fmt(b["pred_mean"]),
                  _fmt(b["true_mean"]), f"{b['bias']:+.3f}")
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
    threads: ThreadsOpt = 1,
) -> None:
    """Fit a world model on executed trajectories; print held-out metrics and predictions/s, write a PNG."""
    console = _start(threads)
    import torch

    from wmrl.execution.log import ExecutionLog
    from wmrl.models.types import LoraSettings
    from wmrl.world_model.factory import new_world_model
    from wmrl.world_model.metrics import calibration_plot

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
    m, tok = _backbone(model, seed)
    lora = LoraSettings(r=lora_r, alpha=2 * lora_r) if lora_r > 0 else None
    wm = new_world_model(kind, m, tok, lora=lora, max_length=max_length)
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
    console = _start(threads)
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
    m, tok = _backbone(model)
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
    console = _start(threads)
    import time

    from rich.table import Table

    from wmrl.execution.pool import result_or_infra
    from wmrl.execution.types import ExecutionRequest
    from wmrl.models.policy import Policy
    from wmrl.models.scaffolds import DEFAULT_SCAFFOLD, get_scaffold
    from wmrl.world_model.factory import load_world_model
    from wmrl.world_model.regression import RegressionWorldModel

    task_list = _train_tasks(tasks, tasks_dir)
    if not tasks:  # the two smallest train tasks: a short run
        task_list = sorted(task_list, key=lambda t: (t.n_rows or 0, t.id))[:2]
    sc = get_scaffold(scaffold or DEFAULT_SCAFFOLD)
    m, tok = _backbone(model, seed)
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
    executor = _executor(workers, None)
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
    t.add_row("policy sampling", _fmt(gen_wall, 2), _fmt(gen_wall / n, 3), _fmt(gen_cpu / n, 3),
              f"{new_tokens / gen_wall:.1f} tokens/s ({new_tokens} tokens)")
    t.add_row("world-model prediction", _fmt(wm_wall, 2), _fmt(wm_wall / n, 3), _fmt(wm_cpu / n, 3),
              f"{n / wm_wall:.2f} predictions/s")
    t.add_row(f"real execution ({workers} workers)", _fmt(ex_wall, 2), _fmt(ex_sum_wall / n, 3), _fmt(ex_cpu / n, 3),
              f"{n / ex_wall:.2f} executions/s; " + ", ".join(f"{k}={v}" for k, v in statuses.items()))
    console.print(t)
    console.print(f"world model / execution cost per trajectory: wall {res['ratio_wm_to_execution_wall']:.3f}, "
                  f"CPU {res['ratio_wm_to_execution_cpu']:.3f} "
                  f"(execution is {1 / max(res['ratio_wm_to_execution_cpu'], 1e-9):.1f}x the world model's CPU cost)")
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(res, indent=2))


models_app = typer.Typer(help="The LM itself: throughput against the FLOP bound.", no_args_is_help=True)


@models_app.command("bench")
def models_bench_cmd(
    model: ModelOpt = "smollm2-135m",
    task: str = typer.Option("aer-hmda", "--task", help="Train task of the sampling/update measurements."),
    quickstart_tasks: str = typer.Option("vcdextra-titanicp,aer-houseprices,sklearn-diabetes,modeldata-attrition",
                                         "--quickstart-tasks",
                                         help="Tasks of the quickstart step (configs/quickstart.yaml)."),
    tasks_dir: TasksDirOpt = None,
    groups: int = typer.Option(4, "--groups", min=1, help="Groups (copies of --task) per batch."),
    group_size: int = typer.Option(4, "--group-size", min=1, help="Samples per group."),
    max_new_tokens: int = typer.Option(64, "--max-new-tokens", min=1,
                                       help="Completion budget of the sampling measurements."),
    micro_batch: int = typer.Option(4, "--micro-batch", min=1,
                                    help="Rows per forward/backward in the update (the quickstart's)."),
    before: bool = typer.Option(True, "--before/--no-before",
                                help="Also measure the per-row implementation without shared prompts (the baseline)."),
    variants: bool = typer.Option(False, "--variants", help="Also time eager attention and bf16 autocast."),
    seed: SeedOpt = 0,
    json_out: Path | None = typer.Option(None, "--json", help="Also write every figure to this JSON file."),
    threads: ThreadsOpt = 1,
) -> None:
    """Tokens/s of sampling (grammar, free), world-model scoring and the update, and a quickstart step's
    LM CPU-s, before and after shared prompts, beside the FLOP bound measured in the same run."""
    console = _start(threads)
    from wmrl.bench.lm import run_bench

    task_obj = _train_tasks(task, tasks_dir)[0]
    quick = _train_tasks(quickstart_tasks, tasks_dir)
    m, tok = _backbone(model, seed)
    res = run_bench(m, tok, task_obj, quick, groups=groups, group_size=group_size, max_new_tokens=max_new_tokens,
                    micro_batch=micro_batch, seed=seed, before=before, variants=variants,
                    log=lambda s: console.print(s, highlight=False))
    res.update(model=model, task=task, groups=groups, group_size=group_size, max_new_tokens=max_new_tokens)
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(res, indent=2))


def register(app: typer.Typer) -> None:
    """Add this package's commands to the top-level ``wmrl`` app."""
    app.command(name="scaffolds")(scaffolds_cmd)
    app.add_typer(wm_app, name="wm")
    app.add_typer(models_app, name="models")
