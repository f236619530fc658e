"""Commands of ``wmrl.sim``. Imports of heavy libraries stay inside the commands."""
from __future__ import annotations

import math
from pathlib import Path

import typer


def make_out_folder(out: Path) -> None:
    """Create ``--out`` before simulating, so that a bad folder does not cost the whole run.

    Raises:
        typer.BadParameter: ``out`` is a file, or cannot be created (the message says why).
    """
    if out.exists() and not out.is_dir():
        raise typer.BadParameter(f"{out} exists and is not a folder; pass a folder for the outputs",
                                 param_hint="--out")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise typer.BadParameter(f"cannot create the folder {out}: {exc.strerror or exc}", param_hint="--out") from exc


def simulate_command(
    out: Path = typer.Option(Path("sim-out"), "--out",
                             help="Folder for curves.csv.gz, finals.csv, summary.csv/.md, meta.json and PNG plots."),
    preset: str = typer.Option("default", "--preset",
                               help="'default' (full sweep, a few minutes on 2 cores) or 'small' (a quick look)."),
    seeds: int = typer.Option(None, "--seeds", min=1,
                              help="Number of seeds 0..N-1 (default: the preset's, 3 for default)."),
    margin: float = typer.Option(0.01, "--margin",
                                 help="Reward margin below GRPO that counts as matching it in the tables."),
) -> None:
    """Convergence study: GRPO with real execution vs pure world model vs WMRL and its ablations and PPI.

    A seeded contextual bandit with exactly known true reward, trained with the wmrl.core GRPO
    functions; sweeps world-model bias B (monotone, group offset, exploitable), noise sigma and the
    anchor fraction. See docs/simulation.md.
    """
    from wmrl.console import make_console
    from rich.markdown import Markdown
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from wmrl.sim.study import PRESETS, run_study

    console = make_console()
    if preset not in PRESETS:
        raise typer.BadParameter(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}", param_hint="--preset")
    if not (math.isfinite(margin) and margin >= 0):
        raise typer.BadParameter(f"must be a finite reward margin >= 0 (e.g. 0.01), got {margin!r}",
                                 param_hint="--margin")
    make_out_folder(out)
    with Progress(TextColumn("simulating"), BarColumn(), TextColumn("{task.completed}/{task.total} steps"),
                  TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task("sim", total=PRESETS[preset].cfg.steps)
        result = run_study(preset, out=out, seeds=seeds, margin=margin,
                           progress=lambda s, n: bar.update(task, completed=s))
    console.print(f"{result['runs']} runs in {result['wall_s']:.0f} s; wrote {out}/summary.md, summary.csv, "
                  f"curves.csv.gz, finals.csv and {len(result['plots'])} plots")
    console.print(Markdown((Path(out) / "summary.md").read_text()))


def staleness_command(
    out: Path = typer.Option(Path("sim-staleness"), "--out",
                             help="Folder for staleness.md, staleness.csv, staleness_finals.csv."),
    k: list[int] = typer.Option([0, 1, 3, 9], "--k",
                                help="Staleness bounds (steps; must include 0, the synchronous reference)."),
    seeds: int = typer.Option(6, "--seeds", min=1, help="Seeds 0..N-1."),
    steps: int = typer.Option(200, "--steps", min=1, help="Training steps per run."),
    latency_steps: float = typer.Option(3.0, "--latency-steps", min=0.01, help="Median execution latency, in steps."),
    extra_k: list[int] = typer.Option([15, 25], "--extra-k", help=(
        "Further bounds (steps >= 1) at which only the at-bound modes (wait, calibration, drop) are compared.")),
) -> None:
    """Staleness axis: asynchronous anchors (bound k) against synchronous ones, late groups in the gradient
    (importance-corrected) or in the calibration only, and a group still running at the bound waited for or not
    (wmrl.asynchronous.over_bound_anchors). See docs/scaling.md."""
    from wmrl.console import make_console
    from rich.markdown import Markdown

    from wmrl.sim.staleness import run_staleness_study

    if 0 not in k or any(x < 0 for x in k):
        raise typer.BadParameter(f"need bounds >= 0 including 0 (the synchronous reference), got {k}", param_hint="--k")
    if any(x < 1 for x in extra_k):
        raise typer.BadParameter(f"need extra bounds >= 1, got {extra_k}", param_hint="--extra-k")
    make_out_folder(out)
    res = run_staleness_study(out, ks=tuple(sorted(set(k))), seeds=seeds, steps=steps, latency_steps=latency_steps,
                              extra_ks=tuple(sorted(set(extra_k) - set(k))))
    make_console().print(Markdown(res["markdown"]))


def async_command(
    out: Path = typer.Option(Path("sim-async"), "--out", help="Folder for regime.md, regime.csv, regime_finals.csv."),
    seeds: int = typer.Option(24, "--seeds", min=1, help="Seeds 0..N-1."),
    shape: list[str] = typer.Option(["exploit"], "--shape",
                                    help="World-model error shapes: exploit, monotone, offset."),
    method: list[str] = typer.Option(["wmrl", "wmrl-ppi"], "--method", help="Recipes with both streams."),
    horizon: list[int] = typer.Option([200, 1600, 3200], "--horizon", help=(
        "Training steps per run; the learning rate is scaled so that lr x steps is the 200-step study's.")),
    mean_latency_steps: float = typer.Option(10.0, "--mean-latency-steps", min=0.01, help=(
        "Mean execution latency in steps (PAPER_LATENCY's shape scaled; >= 10 is the long-latency regime of "
        "docs/scaling.md).")),
) -> None:
    """The chosen asynchronous setting against the synchronous stream where an execution lasts >= 10 steps: k = the
    latency's cap in steps, over-bound groups to the calibration, steps without anchors skipped (and updated, for
    comparison), at several horizons. See docs/scaling.md."""
    from wmrl.console import make_console
    from rich.markdown import Markdown

    from wmrl.core.recipe import get_recipe
    from wmrl.sim.engine import METHODS
    from wmrl.sim.staleness import WORLD_MODELS, run_regime_study

    if any(h < 1 for h in horizon):
        raise typer.BadParameter(f"need horizons >= 1 step, got {horizon}", param_hint="--horizon")
    fusing = [m for m in METHODS if get_recipe(m).fuses]  # asynchronous anchors need both streams
    bad = [m for m in method if m not in fusing]
    if bad:
        raise typer.BadParameter(f"{bad}: not a recipe with both streams (asynchronous anchors calibrate and fuse "
                                 f"the late ones); choose from {fusing}", param_hint="--method")
    shapes = [w.shape for w in WORLD_MODELS]
    bad = [s for s in shape if s not in shapes]
    if bad:
        raise typer.BadParameter(f"unknown world-model shapes {bad}; choose from {shapes}", param_hint="--shape")
    if not math.isfinite(mean_latency_steps):
        raise typer.BadParameter(f"need a finite number of steps, got {mean_latency_steps}",
                                 param_hint="--mean-latency-steps")
    make_out_folder(out)
    try:
        res = run_regime_study(out, seeds=seeds, shapes=tuple(shape), methods=tuple(method),
                               horizons=tuple(sorted(set(horizon))), mean_steps=mean_latency_steps)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    make_console().print(Markdown(res["markdown"]))


def register(app: typer.Typer) -> None:
    """Add this package's commands to the top-level ``wmrl`` app."""
    app.command(name="simulate")(simulate_command)
    app.command(name="simulate-staleness")(staleness_command)
    app.command(name="simulate-async")(async_command)
