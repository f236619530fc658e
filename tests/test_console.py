"""Messages are never wrapped mid-sentence when the output is not a terminal (a pipe, a log file)."""
from __future__ import annotations

import io

from wmrl.console import PIPE_WIDTH, make_console
from wmrl.training.console import _step_line


def _rec() -> dict:
    return {"step": 12, "n_anchor_groups": 3, "n_groups": 8, "reward_true_mean": 0.71234, "reward_wm_mean": 0.697,
            "reward_wm_calibrated_mean": 0.688, "alpha": 0.25, "loss": 0.123456, "n_infra_errors": 0,
            "episode_turns_mean": 2.5, "episode_submitted_rate": 0.9, "reward_true_turn_gain": 0.05,
            "anchor_late_samples": 1, "anchors_in_flight": 2, "step_wall_s": 12.3}


def test_a_step_line_printed_to_a_pipe_is_one_line():
    buf = io.StringIO()  # not a terminal
    console = make_console(file=buf)
    line = _step_line(_rec())
    assert len(line) > PIPE_WIDTH  # longer than any width: only not wrapping keeps it whole
    console.print(line, highlight=False)
    assert buf.getvalue() == line + "\n"


def test_tables_to_a_pipe_are_laid_out_wide():
    from rich.table import Table

    buf = io.StringIO()
    t = Table()
    t.add_column("key")
    t.add_column("value")
    t.add_row("a" * 60, "b" * 60)
    make_console(file=buf).print(t)
    assert "a" * 60 in buf.getvalue() and "b" * 60 in buf.getvalue()
    assert make_console(file=io.StringIO()).width == PIPE_WIDTH
    assert make_console(file=io.StringIO(), min_width=300).width == 300
