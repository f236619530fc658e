"""``wmrl embodied train | eval | bench | render-check``: the embodied track's commands (docs/embodied.md).

Heavy imports (torch, Meta-World) stay inside the commands.
"""
from __future__ import annotations

import json
from pathlib import Path

import typer

app = typer.Typer(help="The embodied track: WMRL post-training of a robot policy in Meta-World (docs/embodied.md).",
                  no_args_is_help=True)


def _fail(e: BaseException) -> None:
    from wmrl.console import make_console
    from rich.markup import escape

    msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
    make_console(stderr=True).print(f"[red]error:[/red] {escape(str(msg))}", highlight=False)
    raise typer.Exit(2)


@app.command("train")
def train(
    preset: str | None = typer.Option(None, "--preset", "-p", help="tiny (CI, seconds) or bench."),
    config: Path | None = typer.Option(None, "--config", "-c", help="YAML config (on top of the preset)."),
    set_: list[str] | None = typer.Option(None, "--set", "-s", help=(
        "Override, e.g. --set method=grpo; with --resume only the keys a resume may change (optim.steps, eval.*, "
        "threads, checkpoint_every, keep_checkpoints, trackers, tracking.*).")),
    resume: Path | None = typer.Option(None, "--resume", help="Continue the run in RUN_DIR."),
    accept_edited_config: bool = typer.Option(False, "--accept-edited-config",
                                              help="With --resume: accept an edited RUN_DIR/config.yaml."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No per-step lines on stderr."),
) -> None:
    """Post-train the SFT policy with one recipe (``--set method=NAME``: any registered recipe, e.g. grpo, wm,
    wmrl, wmrl-no-debias, wmrl-no-denoise, wmrl-ppi, wmrl-bias-aware, anchor-only, wmrl-flat; or sft). Writes a run
    directory (config.yaml, metrics.jsonl, samples.jsonl, calibration.jsonl,
    eval.jsonl, checkpoints/, ledger.json, summary.json); a killed run continues with --resume RUN_DIR."""
    from wmrl.embodied.config import load_config
    from wmrl.embodied.trainer import RunDirError, run_embodied
    from wmrl.runs.config import ConfigError

    try:
        if resume is not None:
            if preset or config:
                raise ConfigError("--resume reads RUN_DIR/config.yaml; do not pass --preset or --config (--set may "
                                  "change the keys a resume may: optim.steps, eval.*, threads, checkpoint_every, "
                                  "keep_checkpoints, trackers, tracking.*)")
            summ = run_embodied(resume_dir=resume, overrides=list(set_ or []), progress=not no_progress,
                                accept_edited_config=accept_edited_config)
        else:
            if preset is None and config is None:
                raise ConfigError("give --preset tiny|bench or --config FILE (or --resume RUN_DIR)")
            summ = run_embodied(load_config(config, list(set_ or []), preset=preset), progress=not no_progress)
    except (ConfigError, RunDirError, FileNotFoundError, ValueError) as e:
        _fail(e)
    typer.echo(json.dumps(summ, indent=1))


@app.command("eval")
def evaluate(
    run_dir: Path = typer.Argument(..., help="A run directory written by `wmrl embodied train`."),
    checkpoint: str = typer.Option("latest", "--checkpoint", help="'latest', a step number or 'initial' (SFT)."),
    samples: int | None = typer.Option(None, "--samples", help="Episodes per initial state."),
) -> None:
    """Success rate of a checkpoint on the training and held-out initial states (appends eval_cli.jsonl)."""
    from wmrl.embodied.config import config_from_dict
    from wmrl.embodied.policy import GaussianPolicy
    from wmrl.embodied.trainer import EmbodiedTrainer, build_artefacts
    from wmrl.runs.config import ConfigError
    from wmrl.runs.rundir import RunDir, to_json_line

    import tempfile

    import yaml

    try:
        rd = RunDir(run_dir)
        if not rd.config.is_file():
            raise FileNotFoundError(f"{run_dir} is not an embodied run directory (no config.yaml)")
        cfg = config_from_dict(yaml.safe_load(rd.config.read_text()))
        if samples is not None:
            if samples < 1:
                raise ConfigError("--samples must be >= 1")
            cfg.eval.samples_per_state = samples
        with tempfile.TemporaryDirectory() as scratch:  # the trainer's own logs are not wanted here
            eval_rd = RunDir(scratch)
            eval_rd.create()
            tr = EmbodiedTrainer(cfg, eval_rd, build_artefacts(cfg))
            if checkpoint != "initial":
                ck = rd.checkpoint(int(checkpoint) if checkpoint.isdigit() else checkpoint)
                tr.policy.load_state_dict(GaussianPolicy.load(ck / "policy").state_dict())
                tr.step = json.loads((ck / "trainer_state.json").read_text())["step"]
            res = tr.evaluate()
    except (ConfigError, FileNotFoundError, ValueError) as e:
        _fail(e)
    with open(Path(run_dir) / "eval_cli.jsonl", "a") as fh:
        for r in res.values():
            fh.write(to_json_line({**r, "checkpoint": checkpoint}) + "\n")
    for split, r in res.items():
        typer.echo(f"{split:>14}: success {r['success_rate']:.3f} ± {r['se']:.3f} ({r['n_episodes']} episodes, "
                   f"step {r['step']})")


@app.command("bench")
def bench(
    out: Path = typer.Option(Path("runs/embodied-bench"), "--out", "-o", help="Bench folder (resumable)."),
    preset: str = typer.Option("bench", "--preset", "-p", help="Preset every run starts from."),
    recipes: str = typer.Option("sft,grpo,wm,wmrl,wmrl-no-debias,wmrl-no-denoise,anchor-only", "--recipes",
                                help="Comma-separated recipes."),
    seeds: str = typer.Option("0,1,2", "--seeds", help="Comma-separated seeds."),
    set_: list[str] | None = typer.Option(None, "--set", "-s", help="Override for every run."),
) -> None:
    """Every recipe x seed from the shared SFT checkpoint; writes OUT/table.md and OUT/bench.json. Run the same
    command again to continue a bench that was stopped."""
    from wmrl.embodied.bench import format_table, run_bench
    from wmrl.runs.config import ConfigError

    try:
        try:
            sd = [int(s) for s in seeds.split(",") if s.strip()]
        except ValueError:
            raise ValueError(f"--seeds expects comma-separated integers (e.g. 0,1,2), got {seeds!r}") from None
        res = run_bench(out, preset=preset, recipes=[r.strip() for r in recipes.split(",") if r.strip()],
                        seeds=sd, overrides=list(set_ or []))
    except (ConfigError, ValueError) as e:
        _fail(e)
    typer.echo(format_table(res))


@app.command("wm-report")
def wm_report(
    preset: str = typer.Option("bench", "--preset", "-p"),
    set_: list[str] | None = typer.Option(None, "--set", "-s", help="Override, as for train."),
    split: str = typer.Option("train", "--split", help="train or heldout initial states."),
    samples: int = typer.Option(2, "--samples", help="SFT episodes per initial state."),
) -> None:
    """How each collapse of the progress predictor (shaping, peak, final) ranks fresh SFT episodes by success:
    AUC, mean scores, and the fraction of failures scored like a success."""
    from wmrl.embodied.bench import collapse_study
    from wmrl.embodied.config import load_config
    from wmrl.runs.config import ConfigError

    try:
        res = collapse_study(load_config(None, list(set_ or []), preset=preset), split, samples)
    except (ConfigError, ValueError) as e:
        _fail(e)
    typer.echo(json.dumps(res, indent=1))


@app.command("render-check")
def render_check(task: str = typer.Option("push-v3", "--task"), size: int = typer.Option(64, "--size")) -> None:
    """Measure headless rendering (MUJOCO_GL, default egl): milliseconds per step with and without a frame."""
    from wmrl.embodied.env import measure_render

    typer.echo(json.dumps(measure_render(task, size), indent=1))


def register(root: typer.Typer) -> None:
    """Add ``wmrl embodied ...`` to the root app."""
    root.add_typer(app, name="embodied")
