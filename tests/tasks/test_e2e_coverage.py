"""The end-to-end coverage run on a small DSBench-layout checkout: a competition whose own script grades a
synthetic format loads and is graded exactly as its code grades it; one whose script needs a module that is not
installed is refused with that cause, and the other still runs."""
from __future__ import annotations


from wmrl.tasks.e2e_coverage import run_coverage, summary

from tests.support.dsbench import dsbench_eval_script

_HOUSE = ("{imports}\n"
          "performance = mean_absolute_error(answers[args.value], predictions[args.value])")


def test_coverage_run_grades_exactly_or_names_the_cause(tmp_path):
    ev = tmp_path / "DSBench" / "data_modeling" / "evaluation"
    ev.mkdir(parents=True)
    (ev / "house-prices_eval.py").write_text(dsbench_eval_script(_HOUSE.format(imports=""), "SalePrice"))
    broken = _HOUSE.format(imports="import wmrl_no_such_module_ghi")
    (ev / "broken-comp_eval.py").write_text(dsbench_eval_script(broken, "SalePrice"))
    rows = {r.id: r for r in run_coverage(tmp_path / "DSBench", tmp_path / "out")}
    good, bad = rows["house-prices"], rows["broken-comp"]
    assert good.loaded and good.graded_exactly and good.reason == "", good
    assert not bad.loaded and not bad.graded_exactly and "wmrl_no_such_module_ghi" in bad.reason
    assert summary(list(rows.values())) == {"dsbench": {"competitions": 2, "loaded": 1, "graded_exactly": 1,
                                                        "refused": 1}}


_TWO_TARGETS = dsbench_eval_script(
    "c = np.sqrt(np.mean((np.log1p(predictions['ConfirmedCases']) - np.log1p(answers['ConfirmedCases'])) ** 2))\n"
    "f = np.sqrt(np.mean((np.log1p(predictions['Fatalities']) - np.log1p(answers['Fatalities'])) ** 2))\n"
    "performance = (c + f) / 2")


def test_coverage_run_writes_several_targets_where_the_code_reads_them(tmp_path):
    """DSBench's covid19-global-forecasting script reads two target columns: the synthetic answers hold both,
    and the competition loads and grades exactly."""
    ev = tmp_path / "DSBench" / "data_modeling" / "evaluation"
    ev.mkdir(parents=True)
    (ev / "covid19-global-forecasting-week-1_eval.py").write_text(_TWO_TARGETS)
    (row,) = run_coverage(tmp_path / "DSBench", tmp_path / "out")
    assert row.kind == "multitarget" and row.loaded and row.graded_exactly, row
