"""The end-to-end coverage run over the benchmarks' registries (docs/tasks.md, "Measured: end to end"): every
competition built in its benchmark's real layout with synthetic answers, loaded by wmrl's loader and graded by
wmrl and by the benchmark's own code (:func:`wmrl.tasks.e2e_coverage.run_competition`).

    PYTHONPATH=. nice -n 10 python benchmarks/e2e_coverage.py CHECKOUT [CHECKOUT ...] --out DIR
        [--bench dsbench mlebench mledojo] [--limit N] [--ids ID ...] [--protocol NAME] [--redo-refused]
        [--shard K/N] [--summary] [--export DIR2]

CHECKOUT: a checkout of MLE-bench (``mlebench/competitions``), MLE-Dojo (``mledojo/competitions``) or DSBench
(``data_modeling/evaluation``). Each competition's row is appended to ``DIR/rows.jsonl`` as soon as it is known,
so the run may be stopped and started again: competitions with a row are skipped (with ``--redo-refused``, the
refused ones are run again and their new row replaces the old). ``--limit N`` runs at most N competitions of
each benchmark (in id order, the done ones counted). ``--shard K/N`` runs only every N-th competition from the
K-th (K = 0 .. N-1), writing ``DIR/rows-K.jsonl``: N processes started with K = 0 .. N-1 share the run (the
rows of every ``DIR/rows*.jsonl`` are read). ``--summary`` only prints the tables of the rows there:
per benchmark the competitions in the registry, those run, loaded, graded exactly and refused, then every
refusal in one line; ``--export DIR2`` writes the rows (``DIR2/rows.jsonl``) and those tables
(``DIR2/summary.md``) with each checkout's path written as its folder's name and ``DIR``'s own as ``OUT``.

``--protocol NAME`` runs only the competitions of an evaluation protocol's split (``paper``: the WMRL paper's 14
MLE-Dojo competitions; docs/training.md, "Evaluation protocols") and then prints the ``--root`` options that
``wmrl eval --protocol NAME`` takes to evaluate over the folders built: the folders with synthetic answers for a
user without the benchmark's data.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from wmrl.tasks.e2e_coverage import Row, competitions, run_competition, summary
from wmrl.training.config import ConfigError
from wmrl.training.protocol import get_protocol


def read_rows(out: Path) -> dict[tuple[str, str], Row]:
    """The rows of every ``out/rows*.jsonl`` by ``(benchmark, id)``, a later row of a competition winning (a
    graded one over a refused one); a line cut short by a stopped run is skipped."""
    rows: dict[tuple[str, str], Row] = {}
    for path in sorted(out.glob("rows*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                d = json.loads(line)
                row = Row(**{k: d[k] for k in Row.__dataclass_fields__ if k in d})
                old = rows.get((row.benchmark, row.id))
                if old is None or row.graded_exactly or not old.graded_exactly:
                    rows[(row.benchmark, row.id)] = row
            except (ValueError, KeyError, TypeError):
                continue
    return rows


def table(rows: dict[tuple[str, str], Row], registry: dict[str, int]) -> str:
    """Two Markdown tables: per benchmark the competitions of its registry, those run, loaded, graded exactly
    (and their share of the registry), refused, and loaded beside a synthetic leaderboard; then every refusal,
    one line each."""
    s = summary(list(rows.values()))
    lines = ["| benchmark | competitions | run | loaded | graded exactly | graded exactly, % | refused | "
             "beside a synthetic board |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for bench in sorted(set(s) | set(registry)):
        r = s.get(bench, {"competitions": 0, "loaded": 0, "graded_exactly": 0, "refused": 0})
        n = registry.get(bench, r["competitions"])
        boards = sum(1 for x in rows.values() if x.benchmark == bench and x.note)
        lines.append(f"| {bench} | {n} | {r['competitions']} | {r['loaded']} | {r['graded_exactly']} | "
                     f"{100 * r['graded_exactly'] / max(n, 1):.1f} | {r['refused']} | {boards} |")
    lines += ["", "| benchmark | competition | refused because |", "|---|---|---|"]
    lines += [f"| {r.benchmark} | `{r.id}` | {r.reason.replace('|', '/')} |"
              for r in sorted(rows.values(), key=lambda r: (r.benchmark, r.id)) if not r.graded_exactly]
    return "\n".join(lines)


def shortened(rows: dict[tuple[str, str], Row], checkouts: list[Path], out: Path) -> dict[tuple[str, str], Row]:
    """The rows with each checkout's path written as its folder's name and the output folder as ``OUT``."""
    subs = [(str(out.resolve() / "data"), "OUT"), (str(out.resolve()), "OUT"), (str(out / "data"), "OUT"),
            (str(out), "OUT")]
    subs += [(str(c.resolve()), c.resolve().name) for c in checkouts] + [(str(c), c.name) for c in checkouts]

    def short(text: str) -> str:
        for old, new in subs:
            text = text.replace(old, new)
        return text
    return {k: Row(**{**r.as_dict(), "reason": short(r.reason), "note": short(r.note)}) for k, r in rows.items()}


def protocol_roots(rows: dict[tuple[str, str], Row], ids: list[str], checkouts: list[Path], out: Path,
                   name: str) -> str:
    """What ``--protocol NAME`` prints last: how many competitions of the split were built and graded, each one
    refused with its reason, and the ``wmrl eval`` options that evaluate over the folders built (the data folders
    under ``out/data`` and the checkouts, which hold the competitions' metadata and grading code)."""
    done = {cid: r for (_, cid), r in rows.items() if cid in ids}
    ok = [cid for cid in ids if cid in done and done[cid].graded_exactly]
    lines = [f"protocol {name}: {len(ok)} of its {len(ids)} competitions built with synthetic answers and graded "
             "exactly"]
    lines += [f"  not built: {cid}: {done[cid].reason if cid in done else 'not in the checkouts'}"
              for cid in ids if cid not in ok]
    roots = [d for d in sorted((out / "data").glob("*-data")) + sorted((out / "data").glob("dsbench")) if d.is_dir()]
    opts = " ".join(f"--root {p}" for p in [*roots, *checkouts])
    lines.append(f"evaluate: wmrl eval RUN_DIR --protocol {name} {opts}"
                 + (" --allow-missing" if len(ok) < len(ids) else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkouts", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--bench", nargs="*", default=["dsbench", "mlebench", "mledojo"])
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--ids", nargs="*", default=None)
    ap.add_argument("--protocol", default=None, metavar="NAME",
                    help="only the competitions of this evaluation protocol's split (e.g. paper)")
    ap.add_argument("--redo-refused", action="store_true")
    ap.add_argument("--summary", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shard", default="0/1")
    ap.add_argument("--export", type=Path, default=None, metavar="DIR2",
                    help="write DIR2/rows.jsonl and DIR2/summary.md (paths shortened) from the rows and stop")
    a = ap.parse_args(argv)
    for c in a.checkouts:
        if not c.is_dir():
            print(f"error: checkout {c} is not a folder; give a checkout of MLE-bench, MLE-Dojo or DSBench",
                  file=sys.stderr)
            return 2
    if a.protocol is not None:
        try:
            split = get_protocol(a.protocol).split
        except (ConfigError, FileNotFoundError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        if split is None:
            print(f"error: protocol {a.protocol!r} has no split of competitions to build", file=sys.stderr)
            return 2
        a.ids = [t for t in split if a.ids is None or t in a.ids]
    todo = [(b, cid, code, c) for c in a.checkouts for b, cid, code in competitions(c) if b in a.bench]
    registry: dict[str, int] = {}
    for b, *_ in todo:
        registry[b] = registry.get(b, 0) + 1
    try:
        k, n = (int(x) for x in a.shard.split("/"))
        assert 0 <= k < n
    except (ValueError, AssertionError):
        print(f"error: --shard {a.shard!r} is not K/N with 0 <= K < N (e.g. 0/4)", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / ("rows.jsonl" if n == 1 else f"rows-{k}.jsonl")
    rows = read_rows(a.out)
    if a.export is not None:
        short = shortened(rows, a.checkouts, a.out)
        a.export.mkdir(parents=True, exist_ok=True)
        with open(a.export / "rows.jsonl", "w", encoding="utf-8") as f:
            for key in sorted(short):
                f.write(json.dumps(short[key].as_dict()) + "\n")
        (a.export / "summary.md").write_text(table(short, registry) + "\n", encoding="utf-8")
        return 0
    if not a.summary:
        count: dict[str, int] = {}
        for i, (b, cid, code, c) in enumerate(todo):
            if i % n != k or (a.ids is not None and cid not in a.ids):
                continue
            done = rows.get((b, cid))
            if a.limit is not None and count.get(b, 0) >= a.limit:
                continue
            count[b] = count.get(b, 0) + 1
            if done is not None and (done.graded_exactly or not a.redo_refused):
                continue
            t = time.perf_counter()
            row = run_competition(b, cid, code, c, a.out / "data", a.seed)
            rec = {**row.as_dict(), "seconds": round(time.perf_counter() - t, 1)}
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps(rec) + "\n")
            rows[(b, cid)] = row
            print(f"{b} {cid}: {'graded exactly' if row.graded_exactly else row.reason} ({rec['seconds']} s)",
                  flush=True)
    print(table(rows, registry))
    if a.protocol is not None:
        print(protocol_roots(rows, a.ids, a.checkouts, a.out, a.protocol))
    return 0


if __name__ == "__main__":
    sys.exit(main())
