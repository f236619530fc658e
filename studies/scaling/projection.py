"""The projected step times of the WMRL paper's shape (docs/scaling.md, "The projection"), written as a table.

    python studies/scaling/projection.py [--out studies/scaling/projection.md]

:func:`wmrl.core.staleness.project_step_times` for 64 sandbox slots, 8 groups x 8 samples a step with 2 anchor
groups (16 executions), staleness bound k = 9 and the latency model ``PAPER_LATENCY``, at three language-model times
per step T_LM (30, 60 and 120 s, split 50 % generation, 20 % world model, 30 % update). Seeded Monte Carlo (20,000
steps each): the same numbers on every run of the same code; a few seconds of CPU.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from wmrl.core.staleness import PAPER_LATENCY, project_step_times

#: Language-model seconds per step of the rows; (generation, world model, update) = (0.5, 0.2, 0.3) of each.
T_LM = (30, 60, 120)


def table() -> str:
    """The projection as a Markdown table, one row per T_LM."""
    lines = ["| T_LM | T_sync | T_async (k = 9) | wait W | speed-up | utilisation sync / async | staleness mean |",
             "|---|---|---|---|---|---|---|"]
    for t in T_LM:
        p = project_step_times(0.5 * t, 0.2 * t, 0.3 * t, 16, 8, 64, PAPER_LATENCY, 9)
        lines.append(f"| {t} s | {p['t_sync']:.0f} s | {p['t_async']:.0f} s | {p['wait']:.0f} s | "
                     f"{p['speedup']:.1f}x | {p['utilisation_sync']:.2f} / {p['utilisation_async']:.2f} | "
                     f"{p['staleness_mean']:.1f} steps |")
    return "\n".join(lines) + "\n"


def main() -> None:
    """Write the table (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("projection.md"))
    a = ap.parse_args()
    a.out.write_text("`python studies/scaling/projection.py`: `project_step_times` of the WMRL paper's shape "
                     "(64 slots, 16 anchor executions a step in groups of 8, k = 9, `PAPER_LATENCY`).\n\n"
                     + table(), encoding="utf-8")
    print(a.out.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
