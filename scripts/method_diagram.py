"""Draw the WMRL step as a picture: docs/img/wmrl-step.svg (README, docs/architecture.md "One step").

    python scripts/method_diagram.py [--out docs/img/wmrl-step.svg]

policy -> router -> execute (anchors) || world model (every group) -> calibrate -> fuse -> update -> policy.
The output is deterministic (fixed SVG hash salt, no date), so re-running it on unchanged code changes no byte.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "docs" / "img" / "wmrl-step.svg"

#: name -> (x centre, y centre, title, detail, face colour); axes units
BOXES = {
    "policy": (1.4, 3.0, "policy", "LM + LoRA:\nG programs\nper task", "#dbe9f6"),
    "router": (4.4, 3.0, "router", "a fraction rho\nof the groups\nare anchors", "#eeeeee"),
    "execute": (7.7, 4.6, "execute", "anchor groups run\nin the sandbox:\ntrue reward r", "#fde2c8"),
    "wm": (7.7, 1.4, "world model", "scores every group:\npredicted r_hat", "#d9f0d3"),
    "calibrate": (11.0, 3.0, "calibrate", "r_tilde = f_hat(r_hat),\nisotonic on anchors\nof earlier steps", "#eeeeee"),
    "fuse": (14.0, 3.0, "fuse", "weights\nalpha / n_A,\n(1 - alpha) / n_W", "#eeeeee"),
    "update": (17.0, 3.0, "update", "GRPO loss,\none AdamW step", "#dbe9f6"),
}
W, H = 2.5, 1.75


def _box(ax, name: str) -> None:
    x, y, title, detail, face = BOXES[name]
    ax.add_patch(FancyBboxPatch((x - W / 2, y - H / 2), W, H, boxstyle="round,pad=0.02,rounding_size=0.15",
                                linewidth=1.2, edgecolor="#333333", facecolor=face))
    ax.text(x, y + H / 2 - 0.32, title, ha="center", va="center", fontsize=11, fontweight="bold")
    ax.text(x, y - 0.22, detail, ha="center", va="center", fontsize=8.5, linespacing=1.25)


def _arrow(ax, start: tuple[float, float], end: tuple[float, float], label: str = "", rad: float = 0.0,
           label_at: tuple[float, float] | None = None) -> None:
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=13, linewidth=1.2, color="#333333",
                                 connectionstyle=f"arc3,rad={rad}"))
    if label:
        lx, ly = label_at or ((start[0] + end[0]) / 2, (start[1] + end[1]) / 2 + 0.2)
        ax.text(lx, ly, label, ha="center", va="center", fontsize=8, color="#444444", style="italic")


def draw(out: Path) -> Path:
    """Write the diagram to ``out`` (SVG or PNG by suffix); returns ``out``."""
    plt.rcParams["svg.hashsalt"] = "wmrl-step"
    plt.rcParams["svg.fonttype"] = "none"  # text stays text: small, searchable
    fig, ax = plt.subplots(figsize=(13.0, 4.6))
    ax.set_xlim(0.0, 18.4)
    ax.set_ylim(-0.9, 6.0)
    ax.axis("off")
    for name in BOXES:
        _box(ax, name)
    b = BOXES
    r = W / 2
    _arrow(ax, (b["policy"][0] + r, 3.0), (b["router"][0] - r, 3.0), "groups", label_at=(2.9, 3.3))
    _arrow(ax, (b["router"][0] + r, 3.3), (b["execute"][0] - r, b["execute"][1]), "anchors", label_at=(5.75, 4.4))
    _arrow(ax, (b["router"][0] + r, 2.7), (b["wm"][0] - r, b["wm"][1]), "every group", label_at=(5.5, 1.55))
    _arrow(ax, (b["execute"][0] + r, b["execute"][1]), (b["calibrate"][0] - r, 3.3), "pairs (r_hat, r)",
           label_at=(9.95, 4.4))
    _arrow(ax, (b["wm"][0] + r, b["wm"][1]), (b["calibrate"][0] - r, 2.7), "r_hat", label_at=(9.75, 1.65))
    _arrow(ax, (b["calibrate"][0] + r, 3.0), (b["fuse"][0] - r, 3.0))
    _arrow(ax, (b["fuse"][0] + r, 3.0), (b["update"][0] - r, 3.0))
    low = -0.35  # the return path runs under every box
    ux, px = b["update"][0], b["policy"][0]
    ax.plot([ux, ux, px], [3.0 - H / 2, low, low], color="#333333", linewidth=1.2, linestyle="--")
    ax.add_patch(FancyArrowPatch((px, low), (px, 3.0 - H / 2), arrowstyle="-|>", mutation_scale=13, linewidth=1.2,
                                 color="#333333", linestyle="--"))
    ax.text((ux + px) / 2, low - 0.3, "next step: the updated policy samples again", ha="center", va="center",
            fontsize=8, color="#444444", style="italic")
    ax.text(9.2, 5.8, "one WMRL step (docs/architecture.md, \"One step\")", ha="center", va="center",
            fontsize=10, color="#222222")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, bbox_inches="tight", metadata={"Date": None} if out.suffix == ".svg" else None)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output file, .svg or .png (default {DEFAULT_OUT})")
    print(f"wrote {draw(ap.parse_args(argv).out)}")


if __name__ == "__main__":
    main()
