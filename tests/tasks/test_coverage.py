"""``wmrl tasks coverage``: which competitions of a benchmark checkout its own grading code can grade.

The checkouts are written here in tmp_path, in each benchmark's real structure, with grading code
written for these tests.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from wmrl.cli import app
from wmrl.tasks.coverage import REASONS, CoverageError, benchmark_coverage, detect_benchmarks, is_installed

ABSENT = "wmrl_absent_module_for_tests"


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _mlebench_config(comp: Path, answers: str = "test.csv") -> None:
    cfg = {"id": comp.name, "name": comp.name, "competition_type": "simple", "awards_medals": True,
           "description": f"mlebench/competitions/{comp.name}/description.md",
           "dataset": {"answers": f"{comp.name}/prepared/private/{answers}",
                       "sample_submission": f"{comp.name}/prepared/public/sample_submission.csv"},
           "grader": {"name": "accuracy", "grade_fn": f"mlebench.competitions.{comp.name}.grade:grade"},
           "preparer": f"mlebench.competitions.{comp.name}.prepare:prepare"}
    _write(comp / "config.yaml", yaml.safe_dump(cfg))


@pytest.fixture
def mlebench_checkout(tmp_path: Path) -> Path:
    """An MLE-bench checkout: the package with competitions/utils.py and two competitions."""
    root = tmp_path / "mle-bench"
    pkg = root / "mlebench"
    _write(pkg / "__init__.py", "")
    _write(pkg / "competitions" / "__init__.py", "")
    _write(pkg / "competitions" / "utils.py",
           "import numpy as np\n\n\ndef align(submission, answers, id_column):\n"
           "    return submission.sort_values(id_column), answers.sort_values(id_column)\n")
    ok = pkg / "competitions" / "toy-accuracy"
    _mlebench_config(ok)
    _write(ok / "grade.py",
           "import pandas as pd\nfrom sklearn.metrics import accuracy_score\n\n"
           "from mlebench.competitions.utils import align\n\n\n"
           "def grade(submission: pd.DataFrame, answers: pd.DataFrame) -> float:\n"
           "    s, a = align(submission, answers, 'id')\n"
           "    return accuracy_score(a['label'], s['label'])\n")
    bad = pkg / "competitions" / "toy-absent"
    _mlebench_config(bad)
    _write(bad / "grade.py",
           f"import {ABSENT}\n\n\ndef grade(submission, answers):\n    return {ABSENT}.score(submission, answers)\n")
    return root


def _rows(results) -> dict[str, dict]:
    return {r["id"]: r for b in results for r in b.as_dict()["rows"]}


def test_mlebench_checkout_package_import_resolved_and_absent_package_refused(mlebench_checkout):
    (cov,) = benchmark_coverage(mlebench_checkout)
    assert cov.benchmark == "mlebench"
    rows = _rows([cov])
    assert set(rows) == {"toy-accuracy", "toy-absent"}
    ok, bad = rows["toy-accuracy"], rows["toy-absent"]
    assert ok["gradable"] is True and ok["reason"] is None and ok["problems"] == []
    assert ok["code"] == "mlebench/competitions/toy-accuracy/grade.py"
    assert ok["recognised_metric"] == "accuracy"
    assert bad["gradable"] is False and bad["reason"] == "missing_module"
    assert bad["missing_modules"] == [ABSENT]
    assert bad["problems"] == [{"reason": "missing_module", "detail": ABSENT}]
    assert bad["recognised_metric"] is None
    s = cov.summary()
    assert (s["competitions"], s["gradable"], s["refused"], s["recognised"]) == (2, 1, 1, 1)
    assert s["refused_by_reason"] == {**{r: 0 for r in REASONS}, "missing_module": 1}
    assert cov.missing_module_counts() == {ABSENT: {"needed_by": 1, "only_blocker": 1}}


def test_mlebench_imports_followed_through_the_checkout(mlebench_checkout):
    """A checkout module's module-level import counts; an import inside a function the grading code does
    not use, or one guarded by ``except ImportError``, does not."""
    pkg = mlebench_checkout / "mlebench"
    _write(pkg / "utils.py", f"import logging\nimport {ABSENT}_deep\n\n\ndef get_logger(name):\n"
                             "    return logging.getLogger(name)\n")
    _write(pkg / "grade_helpers.py", "from mlebench.utils import get_logger\n\n\n"
                                     "class InvalidSubmissionError(Exception):\n    pass\n")
    _write(pkg / "competitions" / "utils.py",
           "try:\n    import wmrl_absent_optional\nexcept ImportError:\n    wmrl_absent_optional = None\n\n\n"
           "def align(submission, answers, id_column):\n    return submission, answers\n\n\n"
           "def unused():\n    import wmrl_absent_in_unused_function\n")
    comp = pkg / "competitions" / "toy-helpers"
    _mlebench_config(comp)
    _write(comp / "grade.py", "from mlebench.grade_helpers import InvalidSubmissionError\n"
                              "from .local_metric import score\n\n\n"
                              "def grade(submission, answers):\n    return score(submission, answers)\n")
    _write(comp / "local_metric.py", "from mlebench.competitions.utils import align\n\n\n"
                                     "def score(s, a):\n    import wmrl_absent_in_used_function\n    return 0.0\n")
    rows = _rows(benchmark_coverage(mlebench_checkout))
    r = rows["toy-helpers"]
    assert r["reason"] == "missing_module"
    assert r["missing_modules"] == ["wmrl_absent_in_used_function", f"{ABSENT}_deep"]  # sorted
    assert r["detail"] == ("wmrl_absent_in_used_function (imported by mlebench/competitions/toy-helpers/"
                           f"local_metric.py), {ABSENT}_deep (imported by mlebench/utils.py)")
    assert rows["toy-accuracy"]["gradable"] is True  # the optional and the unused imports refuse nothing


def test_mlebench_other_reasons(mlebench_checkout):
    comps = mlebench_checkout / "mlebench" / "competitions"
    _mlebench_config(comps / "toy-jsonl", answers="test.jsonl")
    _write(comps / "toy-jsonl" / "grade.py", "def grade(submission, answers):\n    return 0.0\n")
    _mlebench_config(comps / "toy-nocode")
    _mlebench_config(comps / "toy-noentry")
    _write(comps / "toy-noentry" / "grade.py", "def score(submission, answers):\n    return 0.0\n")
    _mlebench_config(comps / "toy-onearg")
    _write(comps / "toy-onearg" / "grade.py", "def grade(submission):\n    return 0.0\n")
    _mlebench_config(comps / "toy-net")
    _write(comps / "toy-net" / "grade.py", "import urllib.request\n\n\ndef grade(submission, answers):\n"
                                            "    return float(urllib.request.urlopen('x').read())\n")
    _mlebench_config(comps / "toy-gpu")
    _write(comps / "toy-gpu" / "grade.py", "def grade(submission, answers):\n"
                                            "    return submission.values.cuda().sum()\n")
    _mlebench_config(comps / "toy-badhelper")
    _write(comps / "toy-badhelper" / "grade.py", "from .helper import score\n\n\ngrade = score\n")
    _write(comps / "toy-badhelper" / "helper.py", "def score(submission, answers)\n    return 0.0\n")
    rows = _rows(benchmark_coverage(mlebench_checkout))
    assert rows["toy-badhelper"]["reason"] == "syntax_error"
    assert rows["toy-badhelper"]["detail"].startswith("mlebench/competitions/toy-badhelper/helper.py: ")
    assert rows["toy-jsonl"]["reason"] == "not_csv"
    assert rows["toy-jsonl"]["detail"] == "config.yaml dataset.answers is test.jsonl, not a CSV"
    assert rows["toy-nocode"]["reason"] == "no_grading_code" and rows["toy-nocode"]["code"] is None
    assert rows["toy-noentry"]["reason"] == "no_entry_point"
    assert rows["toy-noentry"]["detail"] == "no function grade(submission, answers)"
    assert rows["toy-onearg"]["reason"] == "no_entry_point"
    assert rows["toy-net"]["reason"] == "gpu_or_network"
    assert rows["toy-net"]["detail"].startswith(
        "network: mlebench/competitions/toy-net/grade.py: imports urllib.request")
    assert rows["toy-gpu"]["reason"] == "gpu_or_network" and rows["toy-gpu"]["detail"].startswith("GPU: ")


_DOJO_BASE = ("class InvalidSubmissionError(Exception):\n    pass\n\n\n"
              "class CompetitionMetrics:\n    def __init__(self, higher_is_better=True):\n"
              "        self.higher_is_better = higher_is_better\n")


@pytest.fixture
def mledojo_checkout(tmp_path: Path) -> Path:
    """An MLE-Dojo checkout: mledojo/metrics/base.py, a numpy metric and a metric with a syntax error."""
    root = tmp_path / "MLE-Dojo"
    pkg = root / "mledojo"
    _write(pkg / "__init__.py", '__version__ = "0"\n')
    _write(pkg / "metrics" / "__init__.py", "")
    _write(pkg / "metrics" / "base.py", _DOJO_BASE)
    _write(pkg / "competitions" / "__init__.py", "")
    ok = pkg / "competitions" / "toy-rmse"
    _write(ok / "info" / "description.txt", "Predict y.\n")
    _write(ok / "utils" / "metric.py",
           "import numpy as np\nimport pandas as pd\nfrom mledojo.metrics.base import CompetitionMetrics\n\n\n"
           "class ToyRmseMetrics(CompetitionMetrics):\n"
           "    def __init__(self, value='y', higher_is_better=False):\n"
           "        super().__init__(higher_is_better)\n        self.value = value\n\n"
           "    def evaluate(self, y_true, y_pred):\n"
           "        return float(np.sqrt(np.mean((y_true[self.value] - y_pred[self.value]) ** 2)))\n")
    bad = pkg / "competitions" / "toy-broken"
    _write(bad / "info" / "description.txt", "Broken.\n")
    _write(bad / "utils" / "metric.py", "from mledojo.metrics.base import CompetitionMetrics\n\n"
                                        "class Broken(CompetitionMetrics)\n    pass\n")
    return root


def test_mledojo_numpy_metric_gradable_and_syntax_error_refused(mledojo_checkout):
    (cov,) = benchmark_coverage(mledojo_checkout)
    assert cov.benchmark == "mledojo"
    rows = _rows([cov])
    assert set(rows) == {"toy-rmse", "toy-broken"}
    ok, bad = rows["toy-rmse"], rows["toy-broken"]
    assert ok["gradable"] is True and ok["code"] == "mledojo/competitions/toy-rmse/utils/metric.py"
    assert ok["recognised_metric"] is None  # a hand-written RMSE without sklearn: wmrl's fast path cannot tell
    assert bad["reason"] == "syntax_error" and len(bad["problems"]) == 1
    assert bad["detail"].startswith("mledojo/competitions/toy-broken/utils/metric.py: ")
    assert "(line 3)" in bad["detail"]
    assert cov.summary()["refused_by_reason"]["syntax_error"] == 1


def test_mledojo_entry_point_rules(mledojo_checkout):
    comps = mledojo_checkout / "mledojo" / "competitions"
    head = "from mledojo.metrics.base import CompetitionMetrics\n\n\n"
    _write(comps / "toy-two" / "utils" / "metric.py", head +
           "class A(CompetitionMetrics):\n    def evaluate(self, y_true, y_pred):\n        return 0.0\n\n\n"
           "class B(A):\n    pass\n")
    _write(comps / "toy-args" / "utils" / "metric.py", head +
           "class A(CompetitionMetrics):\n    def __init__(self, value):\n        super().__init__(True)\n\n"
           "    def evaluate(self, y_true, y_pred):\n        return 0.0\n")
    _write(comps / "toy-noeval" / "utils" / "metric.py", head + "class A(CompetitionMetrics):\n    pass\n")
    _write(comps / "toy-nometric" / "info" / "description.txt", "No metric file.\n")
    rows = _rows(benchmark_coverage(mledojo_checkout))
    assert rows["toy-two"]["detail"] == "2 subclasses of CompetitionMetrics (A, B); the convention needs one"
    assert rows["toy-args"]["detail"] == "A() cannot be made without arguments (its __init__ requires some)"
    assert rows["toy-noeval"]["detail"] == "A has no evaluate(y_true, y_pred)"
    assert {rows[k]["reason"] for k in ("toy-two", "toy-args", "toy-noeval")} == {"no_entry_point"}
    assert rows["toy-nometric"]["reason"] == "no_grading_code"
    assert rows["toy-nometric"]["detail"] == "no mledojo/competitions/toy-nometric/utils/metric.py"


_DSB_SCRIPT = (
    "import argparse\nimport os.path\n\nimport pandas as pd\nfrom sklearn.metrics import mean_absolute_error\n\n"
    "parser = argparse.ArgumentParser()\n"
    "{args}"
    "args = parser.parse_args()\n"
    "answers = pd.read_csv(args.answer_file)\npredictions = pd.read_csv(args.predict_file)\n"
    "score = mean_absolute_error(answers['y'], predictions['y'])\n"
    "with open(os.path.join(args.path, args.name, 'result.txt'), 'w') as f:\n    f.write(str(score))\n")
_DSB_ARGS = "".join(f"parser.add_argument('--{a}', type=str, required=True)\n"
                    for a in ("path", "name", "answer_file", "predict_file"))


@pytest.fixture
def dsbench_checkout(tmp_path: Path) -> Path:
    """A DSBench checkout: data_modeling/data.json and one evaluation script."""
    root = tmp_path / "DSBench"
    dm = root / "data_modeling"
    _write(dm / "data.json", json.dumps({"name": "toy-mae", "url": "", "size": "1 kB", "year": 2024}) + "\n")
    _write(dm / "evaluation" / "toy-mae_eval.py", _DSB_SCRIPT.format(args=_DSB_ARGS))
    return root


def test_dsbench_eval_script_gradable(dsbench_checkout):
    (cov,) = benchmark_coverage(dsbench_checkout)
    assert cov.benchmark == "dsbench"
    assert [c.as_dict() for c in cov.competitions] == [{
        "id": "toy-mae", "code": "data_modeling/evaluation/toy-mae_eval.py", "gradable": True, "reason": None,
        "detail": None, "problems": [], "missing_modules": [], "recognised_metric": "mae"}]


def test_dsbench_missing_arguments_and_missing_script(dsbench_checkout):
    dm = dsbench_checkout / "data_modeling"
    with open(dm / "data.json", "a") as fh:
        fh.write(json.dumps({"name": "toy-noscript"}) + "\n")
    _write(dm / "evaluation" / "toy-args_eval.py", _DSB_SCRIPT.format(
        args=_DSB_ARGS.replace("--name", "--label") + "parser.add_argument('--extra', required=True)\n"))
    _write(dm / "evaluation" / "toy-extra_eval.py", _DSB_SCRIPT.format(
        args=_DSB_ARGS + "parser.add_argument('--extra', required=True)\n"))
    rows = _rows(benchmark_coverage(dsbench_checkout))
    assert rows["toy-noscript"]["reason"] == "no_grading_code"
    assert rows["toy-args"]["reason"] == "no_entry_point"
    assert rows["toy-args"]["detail"] == "the script takes no --name argument"
    assert rows["toy-extra"]["detail"] == "the script also requires --extra, which DSBench's runner does not pass"
    assert rows["toy-mae"]["gradable"] is True


def test_detect_from_package_folder_and_bad_paths(mlebench_checkout, dsbench_checkout, tmp_path):
    assert detect_benchmarks(mlebench_checkout / "mlebench") == [("mlebench", mlebench_checkout.resolve())]
    assert detect_benchmarks(dsbench_checkout / "data_modeling") == [("dsbench", dsbench_checkout.resolve())]
    with pytest.raises(CoverageError, match="does not exist"):
        detect_benchmarks(tmp_path / "nowhere")
    with pytest.raises(CoverageError, match="is a file"):
        detect_benchmarks(mlebench_checkout / "mlebench" / "__init__.py")
    (tmp_path / "plain").mkdir()
    with pytest.raises(CoverageError, match="not a benchmark checkout"):
        detect_benchmarks(tmp_path / "plain")


def test_is_installed():
    assert is_installed("json") and is_installed("numpy")
    assert not is_installed(ABSENT)


def _norm(text: str) -> str:
    return " ".join(text.split())


def test_cli_json_to_stdout_and_file(mledojo_checkout, tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["tasks", "coverage", str(mledojo_checkout), "--json", "-"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    (b,) = doc["benchmarks"]
    assert (b["benchmark"], b["competitions"], b["gradable"], b["refused"]) == ("mledojo", 2, 1, 1)
    assert {r["id"]: r["reason"] for r in b["rows"]} == {"toy-rmse": None, "toy-broken": "syntax_error"}

    out = tmp_path / "cov.json"
    res = runner.invoke(app, ["tasks", "coverage", str(mledojo_checkout), "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["benchmarks"][0]["rows"] == b["rows"]
    text = _norm(res.stdout)
    assert "MLE-Dojo" in text and "syntax_error" in text


def test_cli_bad_paths_exit_2(tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["tasks", "coverage", str(tmp_path / "nowhere")])
    assert res.exit_code == 2
    assert "does not exist" in _norm(res.output)
    (tmp_path / "plain").mkdir()
    res = runner.invoke(app, ["tasks", "coverage", str(tmp_path / "plain")])
    assert res.exit_code == 2
    assert "is not a benchmark checkout" in _norm(res.output)
    assert "mlebench/competitions/ (MLE-bench)" in _norm(res.output)


def test_cli_unwritable_json_file_exit_2(dsbench_checkout, tmp_path):
    res = CliRunner().invoke(app, ["tasks", "coverage", str(dsbench_checkout), "--json",
                                   str(tmp_path / "no-such-folder" / "cov.json")])
    assert res.exit_code == 2
    assert "cannot write" in _norm(res.output)
