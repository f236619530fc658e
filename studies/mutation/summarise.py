"""Summarise a mutmut run over wmrl/core and the task metrics (docs/testing.md, "Mutation testing").

    pip install mutmut==3.8.1                    # a developer tool; not a dependency of wmrl or its tests
    nice -n 15 mutmut run --max-children 1       # from the repository root; configured in pyproject.toml
    python studies/mutation/summarise.py --date 2026-12-05 --hardware "a 2-core x86 CPU, 24 GiB, no GPU" \
        --wall-min 57 --command "the mutmut command(s) run" --recheck RECHECK-OUTPUT ...

reads the verdicts mutmut left in ``mutants/**/*.py.meta`` (its own files) and writes ``summary.md`` beside this
script: the kill rate per mutated file and in all, the surviving mutants per function and their names. A mutant is
*killed* when a test of the selection (``pyproject.toml``, ``pytest_add_cli_args_test_selection``) failed
against it; *survived* when every test that reaches the mutated function passed; *no tests* when no test reaches
it; *timeout* when the tests ran past mutmut's limit; *not checked* when the run did not reach it (a run by name
checks a sample). The kill rate is killed / (every mutant that was checked); timeouts count as not killed.
"""
from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path

from mutmut.stats import status_by_exit_code

STATUSES = ("killed", "survived", "no tests", "timeout")


def verdicts(root: Path) -> dict[str, str]:
    """Mutant name -> status (mutmut's words) for every mutant in ``root/mutants``."""
    out: dict[str, str] = {}
    for meta in sorted((root / "mutants").rglob("*.py.meta")):
        for name, code in json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"].items():
            out[name] = status_by_exit_code[code]
    return out


def _file_of(name: str) -> str:
    module = name.rsplit(".", 1)[0]
    return module.replace(".", "/") + ".py"


def _function_of(name: str) -> str:
    func = name.rsplit(".", 1)[1].split("__mutmut_")[0]
    return func.removeprefix("xǁ").removeprefix("x_").replace("ǁ", ".")


def summary(v: dict[str, str], command: str, date: str, hardware: str, wall_min: float,
            rechecked: set[str] | None = None, note: str = "") -> str:
    """The Markdown of ``summary.md``."""
    by_file: dict[str, Counter[str]] = defaultdict(Counter)
    for name, status in v.items():
        by_file[_file_of(name)][status] += 1
    total: Counter[str] = sum(by_file.values(), Counter())
    checked = sum(n for s, n in total.items() if s != "not checked")

    def row(label: str, c: Counter[str]) -> str:
        n = sum(k for s, k in c.items() if s != "not checked")
        rate = f"{100 * c['killed'] / n:.1f} %" if n else "n/a"
        return f"| {label} | {sum(c.values())} | {n} | " + " | ".join(str(c[s]) for s in STATUSES) + f" | {rate} |"

    lines = [f"`{command}` (mutmut 3.8.1, configured in `pyproject.toml`, `[tool.mutmut]`), {date}, {hardware}, "
             f"{checked} mutants checked in {wall_min:.0f} min of wall time"
             + (f"; {total['not checked']} not checked" if total["not checked"] else "") + "."
             + (f" {note}" if note else ""), "",
             "| file | generated | checked | killed | survived | no tests | timeout | kill rate |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [row(f"`{f}`", c) for f, c in sorted(by_file.items())]
    lines += [row("all", total), "", "Surviving mutants per function, and those that the tests written for them "
              "(`tests/*/test_*_mutants.py`) kill, each run against the mutant with `recheck.py`:", "",
              "| function | survived | killed by the added tests | of |", "|---|---|---|---|"]
    per_fn: dict[str, Counter[str]] = defaultdict(Counter)
    for name, status in v.items():
        per_fn[f"`{_file_of(name)}` `{_function_of(name)}`"][status] += 1
    killed_after: Counter[str] = Counter(f"`{_file_of(n)}` `{_function_of(n)}`" for n in (rechecked or set())
                                         if v.get(n) == "survived")
    lines += [f"| {fn} | {c['survived']} | {killed_after[fn]} | {sum(c.values())} |"
              for fn, c in sorted(per_fn.items(), key=lambda kv: (-kv[1]["survived"], kv[0])) if c["survived"]]
    lines += ["", "The surviving mutants (`mutmut show NAME` prints one's change):", ""]
    lines += [f"- `{name}`" + (" (killed by the added tests)" if name in (rechecked or set()) else "")
              for name, status in sorted(v.items()) if status == "survived"]
    return "\n".join(lines) + "\n"


def main() -> None:
    """Write ``summary.md`` (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path("."), help="where mutmut ran (holds mutants/)")
    ap.add_argument("--date", required=True)
    ap.add_argument("--hardware", required=True)
    ap.add_argument("--wall-min", type=float, required=True, help="the run's wall time, minutes")
    ap.add_argument("--command", default="nice -n 15 mutmut run --max-children 1",
                    help="the mutmut command(s) that made the verdicts, as the summary quotes them")
    ap.add_argument("--recheck", type=Path, nargs="*", default=[],
                    help="outputs of recheck.py: its KILLED lines mark survivors that the added tests kill")
    ap.add_argument("--note", default="", help="a sentence after the counts (e.g. what a stopped run left out)")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("summary.md"))
    a = ap.parse_args()
    v = verdicts(a.root)
    if not v:
        raise SystemExit(f"no mutmut verdicts under {a.root / 'mutants'}: run `mutmut run` there first")
    rechecked = {line.split()[1] for f in a.recheck for line in f.read_text(encoding="utf-8").splitlines()
                 if line.startswith("KILLED ")}
    a.out.write_text(summary(v, a.command, a.date, a.hardware, a.wall_min, rechecked, a.note), encoding="utf-8")
    print(a.out.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
