"""The rich consoles wmrl prints with: :func:`make_console`; a program's own text goes through :func:`program_text`.

On a terminal a console is rich's usual one (its width is the terminal's). When the output is not a
terminal (a pipe, a log file, a test runner) rich would wrap every line at 80 columns, breaking
messages and step lines mid-sentence; a console made here then never wraps printed text
(``soft_wrap``) and lays tables out :data:`PIPE_WIDTH` columns wide.
"""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from wmrl.program_text import clean

#: Width of tables printed when the output is not a terminal, columns.
PIPE_WIDTH = 200


def make_console(*, stderr: bool = False, width: int | None = None, min_width: int | None = None,
                 **kwargs: Any) -> Any:
    """A ``rich.console.Console`` on stdout (or stderr) that never wraps a line mid-sentence in a log.

    Args:
        stderr: print to stderr instead of stdout.
        width: fixed width, columns (default: the terminal's; :data:`PIPE_WIDTH` when not a terminal).
        min_width: at least this many columns (a table that needs them), on a terminal too.
        kwargs: more ``Console`` arguments.

    Returns:
        The console. When its stream is not a terminal, ``print`` does not wrap text (``soft_wrap``)
        and tables are laid out ``width`` (default :data:`PIPE_WIDTH`) columns wide.
    """
    probe = Console(stderr=stderr, width=width, **kwargs)
    if probe.is_terminal:
        if min_width and probe.width < min_width:
            return Console(stderr=stderr, width=min_width, **kwargs)
        return probe
    kwargs.setdefault("soft_wrap", True)
    return Console(stderr=stderr, width=max(width or PIPE_WIDTH, min_width or 0), **kwargs)


def fmt(x: Any, nd: int = 3) -> str:
    """A metric as log text: ``-`` for None, floats to ``nd`` decimals, anything else as ``str``."""
    return "-" if x is None else (f"{x:.{nd}f}" if isinstance(x, float) else str(x))


def program_text(text: object, limit: int | None = None) -> Text:
    """Text a program controls (its output, an exception message) as a rich ``Text`` to print or put in a table.

    The text is cleaned (:func:`wmrl.program_text.clean`: no escape sequence or control character reaches the
    terminal; at most ``limit`` characters, the tail kept) and, being a ``Text``, never parsed for rich markup,
    so ``[bold]`` or ``[/nonsense]`` show as written.
    """
    return Text(clean(text, limit))
