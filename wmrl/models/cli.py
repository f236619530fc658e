"""Commands of ``wmrl.models``, and the option declarations and helpers that the LM's other commands share.
Imports of heavy libraries stay inside the commands.

* ``wmrl scaffolds``: valid-program rate and status mix of each scaffold on the built-in train tasks
  (``--uniform``: programs drawn uniformly from each grammar, no LM).

The world model's commands (``wmrl wm``) are :mod:`wmrl.world_model.cli`; ``wmrl models bench`` is
:mod:`wmrl.bench.cli`'s. Both use the options and helpers declared here (one declaration each).
"""
from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Annotated, Any

import typer

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


# ------------------------------------------------------------------------------------------ helpers


def quiet() -> None:
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


def set_threads(n: int) -> None:
    """Use ``n`` torch CPU threads (0: torch's default)."""
    import torch

    if n > 0:
        torch.set_num_threads(n)


def load_backbone_or_exit(name: str, seed: int = 0) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of the backbone ``name`` (``tiny``: a seeded tiny model).

    Raises:
        typer.BadParameter: the backbone cannot be loaded (one line naming ``--model``).
    """
    from wmrl.models.backbone import load_backbone, tiny_backbone

    if name == "tiny":
        return tiny_backbone(seed=seed)
    try:
        return load_backbone(name)
    except (FileNotFoundError, OSError, ValueError) as e:
        raise typer.BadParameter(f"cannot load backbone {name!r}: {e}", param_hint="--model") from None


def train_tasks(ids: str | None, tasks_dir: list[Path] | None, split: str = "train") -> list[Any]:
    """The tasks ``ids`` (comma-separated; None: every task of ``split``) of the suite under ``tasks_dir``.

    Raises:
        typer.BadParameter: an unknown id, a held-out id where train tasks are asked for, or no task at all.
    """
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


def mean_or_nan(xs: list[Any]) -> float:
    """Mean of ``xs``; NaN when empty or when any value is None / NaN."""
    if not xs or any(x is None or (isinstance(x, float) and math.isnan(x)) for x in xs):
        return float("nan")
    return float(sum(xs) / len(xs))


def start_command(threads: int) -> Any:
    """What every command does first: quiet libraries, set torch threads; returns a rich console,
    150 columns wide when the output is not a terminal (logs, docs)."""
    import sys

    from wmrl.console import make_console

    quiet()
    set_threads(threads)
    return make_console() if sys.stdout.isatty() else make_console(width=150)


def fmt(x: Any, digits: int = 3) -> str:
    """``x`` for a table cell: ``-`` for None, ``digits`` decimals for a float."""
    if x is None:
        return "-"
    if isinstance(x, float):
        return "nan" if math.isnan(x) else f"{x:.{digits}f}"
    return str(x)


def local_executor(workers: int, log_path: Path | None) -> Any:
    """A :class:`~wmrl.execution.pool.LocalExecutor` of ``workers`` sandboxes, logging to ``log_path`` (or not)."""
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
    console = start_command(threads)
    from rich.table import Table

    from wmrl.models.scaffolds import DEFAULT_SCAFFOLD, SCAFFOLDS, get_scaffold
    from wmrl.models.corpus import collect_uniform, collect_warmup

    unknown = [n for n in scaffold or [] if n not in SCAFFOLDS.names()]
    if unknown:
        raise typer.BadParameter(f"unknown scaffold(s) {unknown}; choose from {', '.join(SCAFFOLDS.names())}",
                                 param_hint="--scaffold")
    task_list = train_tasks(tasks, tasks_dir)
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
        m, tok = load_backbone_or_exit(model, seed)
        policy = Policy(m, tok)
    sampler = "uniform" if uniform else model
    rows: list[dict[str, Any]] = []
    executor = local_executor(workers, log)
    try:
        for name in names:
            sc = get_scaffold(name)
            if policy is not None and max_new_tokens is not None:
                try:
                    policy.check_max_new_tokens(sc, task_list, max_new_tokens)
                except ValueError as e:
                    raise typer.BadParameter(str(e), param_hint="--max-new-tokens") from None
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
                "mean_reward_all": mean_or_nan([r["reward"] for r in recs if r["status"] != "infra_error"]),
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
        table.add_row(r["scaffold"] + mark, str(r["samples"]), fmt(r["well_formed"]),
                      *(fmt(r["status_shares"][s]) for s in PROGRAM_STATUSES), str(r["infra_errors"]),
                      fmt(r["mean_reward_all"]), fmt(r["gen_s_per_sample"], 2), fmt(r["exec_s_per_sample"], 2))
    console.print(table)
    console.print(f"Highest valid-program rate: [bold]{best['scaffold']}[/] ({fmt(best['valid_program_rate'])}); "
                  f"DEFAULT_SCAFFOLD = {DEFAULT_SCAFFOLD!r}"
                  + ("" if uniform or best["scaffold"] == DEFAULT_SCAFFOLD or len(rows) < len(SCAFFOLDS.names())
                     else "  [yellow](the measurement disagrees with the default for this model)[/]"))
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps({"model": None if uniform else model, "sampler": sampler, "seed": seed,
                                        "tasks": [t.id for t in task_list], "samples": samples,
                                        "default": DEFAULT_SCAFFOLD, "best": best["scaffold"], "rows": rows}, indent=2))


def register(app: typer.Typer) -> None:
    """Add this package's commands to the top-level ``wmrl`` app."""
    app.command(name="scaffolds")(scaffolds_cmd)
