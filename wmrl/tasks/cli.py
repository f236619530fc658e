"""Commands of ``wmrl.tasks``. Imports of heavy libraries stay inside the commands."""
from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this package's commands to the top-level ``wmrl`` app."""
