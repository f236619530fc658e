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
