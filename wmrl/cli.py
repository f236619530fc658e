"""The ``wmrl`` command line. Each package adds its own commands through ``register(app)``.

Heavy imports (torch, transformers, ray) happen inside the commands, so ``wmrl --help`` and
``wmrl tasks list`` start fast.
"""
from __future__ import annotations

import os

# Idle OpenMP threads sleep instead of spinning: spinning threads burn CPU without doing work and, on
# a loaded machine, inflated the trainer's measured CPU-seconds up to 10x. It must be set before torch
# is imported (every command imports it lazily, so here is early enough); an explicit value wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import typer

app = typer.Typer(
    name="wmrl",
    help="World Model RL for AutoResearch agents: tasks, sandboxed execution, world model, training.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


def _register_all() -> None:
    from wmrl.tasks import cli as tasks_cli
    from wmrl.execution import cli as execution_cli
    from wmrl.sim import cli as sim_cli
    from wmrl.models import cli as models_cli
    from wmrl.world_model import cli as world_model_cli
    from wmrl.training import cli as training_cli
    from wmrl.report import cli as report_cli
    from wmrl.bench import cli as bench_cli
    from wmrl.embodied import cli as embodied_cli
    from wmrl.export import cli as export_cli
    from wmrl.serve import cli as serve_cli

    for module in (tasks_cli, execution_cli, sim_cli, models_cli, world_model_cli, training_cli, report_cli, bench_cli,
                   embodied_cli, serve_cli, export_cli):
        module.register(app)


_register_all()


def main() -> None:
    """Entry point of the ``wmrl`` console script."""
    app()


if __name__ == "__main__":
    main()
