"""The end-to-end coverage run on a small DSBench-layout checkout: a competition whose own script grades a
synthetic format loads and is graded exactly as its code grades it; one whose script needs a module that is not
installed is refused with that cause, and the other still runs."""
from __future__ import annotations


from wmrl.tasks.e2e_coverage import run_coverage, summary

_SCRIPT = '''import argparse
import os

import pandas as pd
{imports}
from sklearn.metrics import mean_absolute_error

parser = argparse.ArgumentParser()
parser.add_argument('--path', type=str, required=True)
parser.add_argument('--name', type=str, required=True)
parser.add_argument('--answer_file', type=str, required=True)
parser.add_argument('--predict_file', type=str, required=True)
parser.add_argument('--value', type=str, default="SalePrice")
args = parser.parse_args()
actual = pd.read_csv(args.answer_file)
submission = pd.read_csv(args.predict_file)
performance = mean_absolute_error(actual[args.value], submission[args.value])
with open(os.path.join(args.path, args.name, "result.txt"), "w") as f:
    f.write(str(performance))
'''


def test_coverage_run_grades_exactly_or_names_the_cause(tmp_path):
    ev = tmp_path / "DSBench" / "data_modeling" / "evaluation"
    ev.mkdir(parents=True)
    (ev / "house-prices_eval.py").write_text(_SCRIPT.format(imports=""))
    (ev / "broken-comp_eval.py").write_text(_SCRIPT.format(imports="import wmrl_no_such_module_ghi"))
    rows = {r.id: r for r in run_coverage(tmp_path / "DSBench", tmp_path / "out")}
    good, bad = rows["house-prices"], rows["broken-comp"]
    assert good.loaded and good.graded_exactly and good.reason == "", good
    assert not bad.loaded and not bad.graded_exactly and "wmrl_no_such_module_ghi" in bad.reason
    assert summary(list(rows.values())) == {"dsbench": {"competitions": 2, "loaded": 1, "graded_exactly": 1,
                                                        "refused": 1}}


_TWO_TARGETS = '''import argparse
import os

import numpy as np
import pandas as pd

parser = argparse.ArgumentParser()
parser.add_argument('--path', type=str, required=True)
parser.add_argument('--name', type=str, required=True)
parser.add_argument('--answer_file', type=str, required=True)
parser.add_argument('--predict_file', type=str, required=True)
parser.add_argument('--value', type=str, default="count")
args = parser.parse_args()
a = pd.read_csv(args.answer_file)
p = pd.read_csv(args.predict_file)
c = np.sqrt(np.mean((np.log1p(p['ConfirmedCases']) - np.log1p(a['ConfirmedCases'])) ** 2))
f = np.sqrt(np.mean((np.log1p(p['Fatalities']) - np.log1p(a['Fatalities'])) ** 2))
performance = (c + f) / 2
with open(os.path.join(args.path, args.name, "result.txt"), "w") as fh:
    fh.write(str(performance))
'''


def test_coverage_run_writes_several_targets_where_the_code_reads_them(tmp_path):
    """DSBench's covid19-global-forecasting script reads two target columns: the synthetic answers hold both,
    and the competition loads and grades exactly."""
    ev = tmp_path / "DSBench" / "data_modeling" / "evaluation"
    ev.mkdir(parents=True)
    (ev / "covid19-global-forecasting-week-1_eval.py").write_text(_TWO_TARGETS)
    (row,) = run_coverage(tmp_path / "DSBench", tmp_path / "out")
    assert row.kind == "multitarget" and row.loaded and row.graded_exactly, row
