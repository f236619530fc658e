"""``wmrl bench``: grpo, wm, wmrl and the wmrl ablations side by side (:mod:`wmrl.bench`). Heavy
imports stay inside the command, so ``wmrl --help`` starts fast."""
from __future__ import annotations

from pathlib import Path

import typer

from wmrl.report.cli import command_line


def bench_cmd(
    preset: str = typer.Option(..., "--preset", "-p", help="Preset name (a shipped preset: cpu-small, "
                               "cpu-lm, gpu-paper) or a preset YAML path."),
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


def register(app: typer.Typer) -> None:
    """Add ``wmrl bench`` to the top-level app."""
    app.command(name="bench")(bench_cmd)
