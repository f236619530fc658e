"""Small benchmark folders in the real on-disk layouts of MLE-Dojo, MLE-bench and DSBench, made offline.

Nothing can be downloaded here, so :func:`build_benchmark_fixtures` takes built-in tasks (real tables
from installed packages, the committed leaderboards of real reference solutions on exactly that split)
and writes them as each benchmark's prepare step or release leaves them::

    <out>/mle-dojo/mledojo/competitions/<id>/{info/description.txt, info/*_leaderboard.csv, utils/metric.py}
    <out>/mle-dojo/data/prepared/<id>/data/public/{train,test,sample_submission}.csv + description.txt
    <out>/mle-dojo/data/prepared/<id>/data/private/{test_answer,public_leaderboard,private_leaderboard}.csv
    <out>/mle-bench/mlebench/competitions/<id>/{config.yaml, description.md, leaderboard.csv, grade.py}
    <out>/mle-bench-data/<id>/prepared/public/...  prepared/private/test.csv
    <out>/dsbench/data_modeling/data/{task/<id>.txt, data_resplit/<id>/*.csv, answers/<id>/test_answer.csv}
    <out>/dsbench/data_modeling/evaluation/<id>_eval.py
    <out>/dsbench/data_modeling/save_performance/{baseline,GT}/<id>/result.txt

Each layout module of :mod:`wmrl.tasks.layouts` writes its own fixtures (its ``fixture``). The metric code
follows each benchmark's convention (a ``CompetitionMetrics`` subclass, ``grade(submission,
answers)``, an ``--answer_file/--predict_file`` script) and is written by wmrl, not copied. Answers are
written only to the private places of each layout (``data/private``, ``prepared/private``,
``data/answers``), never next to the public files. DSBench's baseline score is the constant sample
submission's; its GT score is the answers graded against themselves (how DSBench's GT results arise).
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd

from wmrl.tasks import leaderboard as lb
from wmrl.tasks.layouts import benchmark_layouts, layout
from wmrl.tasks.layouts.base import FixtureDef, FixtureSource
from wmrl.tasks.build import build_suite

__all__ = ["FIXTURES", "FixtureDef", "build_benchmark_fixtures"]

FIXTURES: tuple[FixtureDef, ...] = (
    FixtureDef("mledojo", "dojo-titanicp", "vcdextra-titanicp"),
    FixtureDef("mledojo", "dojo-houseprices", "aer-houseprices"),
    FixtureDef("mlebench", "mleb-attrition", "modeldata-attrition"),
    FixtureDef("mlebench", "mleb-seattle-weather", "vega-seattle_weather", awards_medals=False),
    FixtureDef("dsbench", "dsb-concrete", "modeldata-concrete"),
    FixtureDef("dsbench", "dsb-diabetes", "sklearn-diabetes"),
)


def build_benchmark_fixtures(out: Path | str, benchmarks: tuple[str, ...] | None = None,
                             ids: tuple[str, ...] | None = None) -> dict[str, Path]:
    """Write the :data:`FIXTURES` of ``benchmarks`` (default: every layout with a fixture writer,
    :func:`wmrl.tasks.layouts.benchmark_layouts`), or only ``ids``, under ``out`` (see the module docstring).

    Returns:
        ``{fixture id: task folder}`` (the folder a loader reads; the package metadata lies apart).

    Raises:
        ImportError: the data packages are missing (``pip install 'wmrl[datasets]'``).
        KeyError: an unknown fixture id.
    """

    out = Path(out)
    known = {f.id: f for f in FIXTURES}
    if ids is not None:
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise KeyError(f"unknown fixture(s) {unknown}; known: {', '.join(known)}")
    benchmarks = benchmark_layouts() if benchmarks is None else benchmarks
    defs = [f for f in FIXTURES if f.benchmark in benchmarks and (ids is None or f.id in ids)]
    made: dict[str, Path] = {}
    with tempfile.TemporaryDirectory(prefix="wmrl-fixture-src-") as td:
        built = {t.id: t for t in build_suite(Path(td), sorted({f.source_task for f in defs}))}
        for f in defs:
            t = built[f.source_task]
            src = Path(t.root)
            desc = (src / "description.md").read_text(encoding="utf-8").replace(t.title, f"{t.title} ({f.id})", 1)
            source = FixtureSource(task=t, description=desc, board=lb.read_leaderboard(src / "leaderboard.csv"),
                                   answers=pd.read_csv(src / "private" / "answers.csv"))
            write = layout(f.benchmark).fixture
            assert write is not None, f"layout {f.benchmark!r} writes no fixtures"
            made[f.id] = write(out, f, source)
    return made
