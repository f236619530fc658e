"""``wmrl bench``: grpo, wm, wmrl and the wmrl ablations side by side (:mod:`wmrl.bench`); ``wmrl models bench``:
the LM's tokens/s (sampling, scoring, update) with and without shared prompts, next to the FLOP bound measured in
the same run (:mod:`wmrl.bench.lm`). Heavy imports stay inside the commands, so ``wmrl --help`` starts fast."""
from __future__ import annotations

import json
from pathlib import Path

import typer

from wmrl.models.cli import (ModelOpt, SeedOpt, TasksDirOpt, ThreadsOpt, load_backbone_or_exit, start_command,
                             train_tasks)
from wmrl.report.cli import command_line

#: The shipped presets' names, for the help text (the YAML files beside this module; no heavy import).
_PRESETS = ", ".join(sorted(p.stem for p in (Path(__file__).parent / "configs").glob("*.yaml")))


def bench_cmd(
    preset: str = typer.Option(..., "--preset", "-p", help=f"Preset name (a shipped preset: {_PRESETS}) "
                               "or a preset YAML path."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Bench folder; default runs/bench-<preset>. "
                                       "Rerun the same command to resume; finished runs are skipped."),
    seeds: int | None = typer.Option(None, "--seeds", help="Number of seeds (0..N-1); default the preset's."),
    steps: int | None = typer.Option(None, "--steps", help="Training steps of every run; default the preset's."),
    methods: str | None = typer.Option(None, "--methods", help="Comma-separated subset, e.g. grpo,wmrl; "
                                          "default all of the preset's."),
    set_: list[str] = typer.Option([], "--set", help="Config override for every run, key=value (repeatable)."),
    table_only: bool = typer.Option(False, "--table-only", help="Only (re)write the table from finished runs."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the planned runs and their state, run nothing."),
    mixed_commits: bool = typer.Option(False, "--mixed-commits", help="Write the table although the runs come "
                                       "from several code versions (it lists the runs of each)."),
) -> None:
    """Benchmark grpo, wm, wmrl and the wmrl ablations side by side (same tasks, seeds, steps).

    Each final policy is evaluated on held-out tasks with real execution; the table (Markdown + HTML) and a
    reward-against-compute plot go into the bench folder.
    """
    from wmrl.bench.convergence import write_bench_outputs
    from wmrl.bench.plan import plan, run_state
    from wmrl.bench.presets import BenchError, load_preset
    from wmrl.bench.run import run_bench
    from wmrl.training.config import ConfigError

    try:
        p = load_preset(preset)
        target = out or Path("runs") / f"bench-{p.name}"
        ms = [m.strip() for m in methods.split(",") if m.strip()] if methods else None
        if table_only:
            paths = write_bench_outputs(target, mixed_commits=mixed_commits)
        elif dry_run:
            for r in plan(p, target, seeds, steps, ms, set_):
                typer.echo(f"{r.method:16s} seed {r.seed}  {run_state(r.run_dir):9s}  {r.run_dir}")
            return
        else:
            if p.expected_hours and seeds is None and steps is None:
                typer.echo(f"preset {p.name}: about {p.expected_hours} h on the machine it was sized for")
            cmd = command_line(["bench"], {"--preset": preset, "--out": out, "--seeds": seeds, "--steps": steps,
                                       "--methods": methods}, [("--set", v) for v in set_])
            paths = run_bench(p, target, seeds, steps, ms, set_, command=cmd, mixed_commits=mixed_commits)
    except (BenchError, ConfigError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    except KeyboardInterrupt:
        typer.echo("interrupted: rerun the same command to resume (finished runs are skipped)", err=True)
        raise typer.Exit(130) from None
    for k, v in paths.items():
        typer.echo(f"{k}: {v}")
    typer.echo((paths["markdown"]).read_text(encoding="utf-8"))


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
    console = start_command(threads)
    from wmrl.bench.lm import run_bench

    task_obj = train_tasks(task, tasks_dir)[0]
    quick = train_tasks(quickstart_tasks, tasks_dir)
    m, tok = load_backbone_or_exit(model, seed)
    res = run_bench(m, tok, task_obj, quick, groups=groups, group_size=group_size, max_new_tokens=max_new_tokens,
                    micro_batch=micro_batch, seed=seed, before=before, variants=variants,
                    log=lambda s: console.print(s, highlight=False))
    res.update(model=model, task=task, groups=groups, group_size=group_size, max_new_tokens=max_new_tokens)
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(res, indent=2))


def register(app: typer.Typer) -> None:
    """Add ``wmrl bench`` and ``wmrl models bench`` to the top-level app."""
    app.command(name="bench")(bench_cmd)
    app.add_typer(models_app, name="models")
