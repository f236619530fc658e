"""Commands of ``wmrl.training``: ``train``, ``eval``, ``config show``, ``ledger``.

Imports of heavy libraries stay inside the commands.
"""
from __future__ import annotations

from pathlib import Path

import typer

def _print_error(console: object, e: BaseException) -> None:
    """``error: <message>`` on the console, the message printed literally (no rich markup)."""
    from rich.markup import escape

    msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)  # KeyError's str() adds quotes
    console.print(f"[red]error:[/red] {escape(str(msg))}", highlight=False)  # type: ignore[attr-defined]


config_app = typer.Typer(help="Inspect training configs: every field with its type, value and help.",
                         no_args_is_help=True)


def train(
    config: Path | None = typer.Option(None, "--config", "-c", help="YAML config (see `wmrl config show`)."),
    set_: list[str] | None = typer.Option(None, "--set", "-s",
                                             help="Override one field, e.g. --set optim.steps=3 --set method=grpo."),
    resume: Path | None = typer.Option(None, "--resume",
                                          help="Continue the run in RUN_DIR from its latest checkpoint."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No live progress bar."),
    accept_edited_config: bool = typer.Option(False, "--accept-edited-config",
                                              help="With --resume: use RUN_DIR/config.yaml although it was "
                                                   "edited after the run saved it."),
) -> None:
    """Post-train the agent with GRPO, a pure world model or WMRL (`method`: a registered recipe, e.g. grpo, wm, wmrl,
    wmrl-ppi; see `wmrl config show`).

    Writes a run directory (docs/run-directory.md): config.yaml, metrics.jsonl, eval.jsonl,
    TensorBoard events, executions.sqlite, atomic checkpoints, ledger.json and summary.json.
    A killed run continues with `wmrl train --resume RUN_DIR`.
    """
    from wmrl.console import make_console

    from wmrl.training.config import ConfigError, load_config
    from wmrl.training.components import RunDirError
    from wmrl.training.console import print_summary
    from wmrl.training.run import resume_training, run_training

    err = make_console(stderr=True)
    try:
        if resume is not None:
            if config is not None:
                raise ConfigError("--resume reads RUN_DIR/config.yaml; do not pass --config with it")
            summary = resume_training(resume, list(set_ or []), accept_edited_config=accept_edited_config,
                                      progress=False if no_progress else None)
        else:
            if accept_edited_config:
                raise ConfigError("--accept-edited-config goes with --resume RUN_DIR")
            if config is None and not set_:
                raise ConfigError("give a config: wmrl train --config configs/quickstart.yaml (or --resume RUN_DIR)")
            cfg = load_config(config, list(set_ or []))
            summary = run_training(cfg, progress=False if no_progress else None)
    except (ConfigError, RunDirError, FileNotFoundError, KeyError) as e:
        _print_error(err, e)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        err.print("interrupted: continue with `wmrl train --resume RUN_DIR` (the last checkpoint is kept)")
        raise typer.Exit(130) from None
    print_summary(summary)


def evaluate(
    run_dir: Path = typer.Argument(..., help="A run directory written by `wmrl train`."),
    checkpoint: str = typer.Option("latest", "--checkpoint", help="Checkpoint: 'latest', a step number, a "
                                   "folder name like step_000004, or 'initial' (the policy before training, "
                                   "rebuilt from the run's config)."),
    tasks: list[str] | None = typer.Option(None, "--tasks", help="Task ids to evaluate on (repeatable, or "
                                              "comma-separated); default: the run's held-out (and train) tasks."),
    train_tasks: bool = typer.Option(False, "--train-tasks", help="Evaluate on the run's train tasks only "
                                     "(split 'train', in distribution)."),
    samples: int | None = typer.Option(None, "--samples", help="Samples per task (default: the run's eval config)."),
    protocol: str = typer.Option("default", "--protocol", help="Evaluation protocol: 'default' (the run's tasks and "
                                 "eval settings), 'paper' (the WMRL paper's MLE-Dojo test table: 14 "
                                 "competitions, avg@8, "
                                 "4 turns, temperature 0.8, per-category means), a registered name, or a YAML file "
                                 "(docs/training.md, Evaluation protocols)."),
    root: list[str] | None = typer.Option(None, "--root", help="Task root holding the protocol's competitions "
                                             "(repeatable; default: the run's tasks.root)."),
    allow_missing: bool = typer.Option(False, "--allow-missing", help="Evaluate the competitions of the protocol's "
                                       "split that are found when some are missing (the numbers are then not "
                                       "comparable with the protocol's)."),
    override: list[str] | None = typer.Option(None, "--override", help="KEY=VALUE: change one of the protocol's "
                                              "sampling settings (samples_per_task, max_turns, temperature, top_p, "
                                              "max_new_tokens, time_limit_s; repeatable), e.g. to run it small on "
                                              "a CPU; the numbers are then not comparable with the protocol's."),
    json_out: bool = typer.Option(False, "--json", help="Print the records as JSON lines."),
) -> None:
    """Evaluate a checkpoint of a run with real execution: mean leaderboard percentile, DSBench RPG (tasks with
    a baseline and a gold score), valid-submission rate, medals; under a protocol also avg@k per task,
    per-category means and the overall mean. Appends the records to RUN_DIR/eval_cli.jsonl."""
    import json

    from wmrl.console import make_console

    from wmrl.training.config import ConfigError
    from wmrl.training.evaluate_cli import evaluate_run

    err = make_console(stderr=True)
    ids = [t for item in (tasks or []) for t in item.split(",") if t.strip()]
    try:
        recs = evaluate_run(run_dir, checkpoint=checkpoint, task_ids=ids or None, train_tasks=train_tasks,
                            samples_per_task=samples, protocol=protocol, roots=root or None,
                            allow_missing=allow_missing, overrides=override or ())
    except (ConfigError, FileNotFoundError, KeyError) as e:
        _print_error(err, e)
        raise typer.Exit(2) from None
    for r in recs:
        for reason in (r.get("protocol_result") or {}).get("not_comparable", []):
            err.print(f"[yellow]not comparable with protocol {r['protocol']['name']!r}:[/yellow] "
                      f"{_escape(reason)}", highlight=False)
    if json_out:
        for r in recs:
            typer.echo(json.dumps(r))
        return
    from rich.table import Table

    from wmrl.training.console import rpg_note

    out = make_console()
    t = Table(title=f"wmrl eval {run_dir} ({checkpoint})")
    for col in ("split", "step", "tasks", "samples", "mean percentile", "RPG", "best/task", "valid rate", "gold",
                "silver", "bronze", "infra"):
        t.add_column(col, justify="right")
    for r in recs:
        m = r["medals"]
        t.add_row(r["split"], str(r["step"]), str(r["n_tasks"]), str(r["n_samples"]), _f3(r["mean_percentile"]),
                  "n/a" if r.get("mean_rpg_tasks") is None else _f3(r["mean_rpg_tasks"]),
                  _f3(r["best_percentile_mean"]),
                  _f3(r["valid_rate"]), str(m["gold"]), str(m["silver"]), str(m["bronze"]), str(r["n_infra_errors"]))
    out.print(t)
    for r in recs:  # why RPG is n/a, or which tasks it leaves out
        note = rpg_note(r)
        if note:
            out.print(_escape(f"RPG ({r['split']}): {'n/a: ' if r.get('mean_rpg_tasks') is None else ''}{note}"),
                      highlight=False)
    for r in recs:
        if r.get("protocol_result"):
            for table in protocol_tables(r["protocol_result"]):
                out.print(table)


def _f3(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def protocol_tables(res: dict) -> list:
    """Two rich tables of a ``protocol_result`` (:func:`wmrl.training.protocol.aggregate`), scores in percent:
    avg@k per task (with its failed and infrastructure-failed samples), then the category means and the
    overall number; between them, each competition of the split that was not evaluated, and each one scored as
    failures without running (its submission the scaffold cannot write), with its one-line reason."""
    from rich.console import JustifyMethod
    from rich.table import Table
    from rich.text import Text

    k, name = res["k"], res["protocol"]
    pt = Table(title=f"protocol {name}: avg@{k} per task (%)")
    columns: tuple[tuple[str, JustifyMethod], ...] = (("task", "left"), ("category", "left"), (f"avg@{k}", "right"),
                                                      ("failed", "right"), ("infra", "right"))
    for col, just in columns:
        pt.add_column(col, justify=just)
    for tid, v in res["per_task"].items():
        pt.add_row(_escape(tid), _escape(v["category"]), f"{100 * v['avg_at_k']:.1f}", str(v["n_failed"]),
                   str(v["n_infra"]))
    for tid in res["missing"]:
        pt.add_row(_escape(tid), "", "missing", "", "")
    ct = Table(title=f"protocol {name}: category means (%) over {res['n_tasks']} of its {res['n_split']} "
                     "competitions" + ("" if res["comparable"] else ", NOT COMPARABLE"))
    columns = (("category", "left"), ("tasks", "right"), ("mean", "right"))
    for col, just in columns:
        ct.add_column(col, justify=just)
    for c, v in res["categories"].items():
        ct.add_row(_escape(c), str(v["n_tasks"]), f"{100 * v['mean']:.1f}")
    mark = {res["overall_kind"]: " = overall"}
    ct.add_row("Avg (mean over categories)" + mark.get("category_mean", ""), str(res["n_tasks"]),
               f"{100 * res['category_mean']:.1f}")
    ct.add_row("mean over tasks" + mark.get("task_mean", ""), str(res["n_tasks"]), f"{100 * res['task_mean']:.1f}")
    why = res.get("missing_reasons", {})
    notes = [Text(f"not evaluated: {tid}: {why[tid]}") for tid in res["missing"] if tid in why]
    notes += [Text(f"scored as failures without running ({k} of {k}, the protocol's failure score): {tid}: {w}")
              for tid, w in res.get("unwritable", {}).items()]
    return [pt, *notes, ct]


def show(
    config: Path | None = typer.Option(None, "--config", "-c", help="YAML config to resolve (default: defaults)."),
    set_: list[str] | None = typer.Option(None, "--set", "-s", help="Overrides, as for `wmrl train`."),
    yaml_out: bool = typer.Option(False, "--yaml", help="Print the resolved config as YAML instead of a table."),
) -> None:
    """Print every config field with its type, resolved value and help text."""
    from wmrl.console import make_console
    from rich.markup import escape
    from rich.table import Table

    from wmrl.training.config import ConfigError, TrainConfig, describe_fields, dump_config, load_config

    try:
        cfg = load_config(config, list(set_ or [])) if (config or set_) else TrainConfig()
    except (ConfigError, FileNotFoundError) as e:
        _print_error(make_console(stderr=True), e)
        raise typer.Exit(2) from None
    if yaml_out:
        typer.echo(dump_config(cfg), nl=False)
        return
    t = Table(title=f"training config ({config or 'defaults'})", show_lines=False)
    t.add_column("key", style="bold", no_wrap=True)
    t.add_column("type")
    t.add_column("value")
    t.add_column("help")
    for key, tp, val, help_text in describe_fields(obj=cfg):
        t.add_row(escape(key), escape(tp), escape(val), escape(help_text))
    make_console(width=200).print(t)


def ledger(run_dir: Path = typer.Argument(..., help="A run directory.")) -> None:
    """Print the compute ledger of a run (ledger.json): stages, phases, executions, totals."""
    import json

    from wmrl.runs.ledger import format_ledger

    p = run_dir / "ledger.json"
    if not p.is_file():
        typer.echo(f"error: {p} not found (is {run_dir} a run directory?)", err=True)
        raise typer.Exit(2)
    typer.echo(format_ledger(json.loads(p.read_text())))


def register(app: typer.Typer) -> None:
    """Add this package's commands to the top-level ``wmrl`` app."""
    app.command(name="train")(train)
    app.command(name="eval")(evaluate)
    app.command(name="ledger")(ledger)
    config_app.command(name="show")(show)
    app.add_typer(config_app, name="config")
