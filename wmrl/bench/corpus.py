"""The bench's shared warm-up corpus: collected once per bench folder (``OUT/corpus/executions.sqlite``,
from the initial policy of ``corpus.seed``, executed for real), and every ``wm``/``wmrl`` run fits its
world model on it (``world_model.warmup_corpus``) instead of collecting its own.

Its cost is paid once per bench: ``OUT/corpus/corpus.json`` records it, ``results.csv`` repeats it per
run (``corpus_cpu_s``) and the table gives the compute ratio both without it and with it charged in full
to every run.
"""
from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from wmrl.bench.presets import REFERENCE, BenchError, Preset, method_config
from wmrl.report.bench_results import corpus_dir
from wmrl.training import parts
from wmrl.training.config import config_to_dict


def corpus_log(out: str | Path) -> Path:
    """The shared warm-up corpus of a bench folder: ``OUT/corpus/executions.sqlite``."""
    return corpus_dir(out) / "executions.sqlite"



def _corpus_settings(preset: Preset, overrides: Sequence[str]) -> dict[str, Any]:
    """What a shared corpus depends on: the preset's ``corpus`` and the config parts that make its programs.

    Raises:
        ValueError: the preset has no ``corpus``.
    """
    corpus = preset.corpus
    if corpus is None:
        raise ValueError("the preset shares no warm-up corpus (no 'corpus' section)")
    base = config_to_dict(method_config(preset, REFERENCE, seed=corpus["seed"], run_dir=Path("unused"),
                                        overrides=overrides))
    return {**corpus, **{k: base[k] for k in ("model", "scaffold", "tasks", "rollout")}}


def ensure_corpus(preset: Preset, out: str | Path, log: Callable[[str], None] = print,
                  overrides: Sequence[str] = ()) -> dict[str, Any] | None:
    """Collect the preset's shared warm-up corpus once (see the module docstring); resumable.

    The corpus is made with the same config as the bench's runs (the preset's config plus the bench's
    ``overrides``: tasks, model, scaffold, rollout), from the initial policy of ``corpus.seed``.

    Returns:
        The cost record of ``OUT/corpus/corpus.json`` (:func:`wmrl.training.parts.collect_corpus`), with
        the settings it was made with under ``settings``; None when the preset has no ``corpus``. A folder
        left by an interrupted collection is removed and the corpus collected again; the record is
        written last, atomically. Other invocations on the same ``out`` wait while one collects
        (a lock file ``OUT/.corpus.lock``).

    Raises:
        BenchError: ``OUT/corpus`` holds a corpus made with other settings (the message names them).
        As :func:`wmrl.training.parts.collect_corpus` (a suite not built, an unknown task or model).
    """
    if not preset.corpus:
        return None
    lock = FileLock(Path(out) / ".corpus.lock")  # one invocation collects, the others on the folder wait
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log(f"shared warm-up corpus: being collected by another bench invocation on {out}; waiting for it")
        lock.acquire()
    try:
        return _ensure_corpus_locked(preset, preset.corpus, out, log, overrides)
    finally:
        lock.release()


def _ensure_corpus_locked(preset: Preset, c: dict[str, int], out: str | Path, log: Callable[[str], None],
                          overrides: Sequence[str]) -> dict[str, Any]:
    """:func:`ensure_corpus` once this invocation holds the folder's corpus lock; ``c`` is ``preset.corpus``."""
    d = corpus_log(out).parent
    done = d / "corpus.json"
    settings = json.loads(json.dumps(_corpus_settings(preset, overrides), default=str))
    if done.is_file():
        rec = json.loads(done.read_text(encoding="utf-8"))
        if rec.get("settings") != settings:
            old = rec.get("settings") or {}
            diff = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
            raise BenchError(f"{d} holds a shared corpus made with other settings ({', '.join(diff)}); rerun with "
                             f"the same preset and --set options, or pass another --out")
        return rec
    from wmrl.runs.rundir import write_json_atomic  # noqa: PLC0415

    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    log(f"shared warm-up corpus: {c['samples_per_task']} programs per train task from the initial policy of seed "
        f"{c['seed']}, executed once -> {corpus_log(out)}")
    base = method_config(preset, REFERENCE, seed=c["seed"], run_dir=d / "unused", overrides=overrides)
    cost = parts.collect_corpus(base, corpus_log(out), samples_per_task=c["samples_per_task"],
                                group_size=c["group_size"], seed=c["seed"])
    cost["settings"] = settings
    write_json_atomic(done, cost)
    log(f"shared warm-up corpus: {cost['executions']} executions, {cost['compute_cpu_s']:.0f} CPU-s, "
        f"{cost['wall_s']:.0f} s wall")
    return cost
