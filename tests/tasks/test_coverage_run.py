"""The benchmark's metric code in children forked from one long-lived interpreter: what a run does to its
interpreter (a patched module, a killed parent, a run past its limit) never reaches the driver or the next run."""
from __future__ import annotations

import pytest

from wmrl.tasks.benchcode import MetricCodeError, run_metric_code

from tests.support.dsbench import dsbench_eval_script

_GRADE = '''import os, signal, time
import pandas as pd


def grade(submission, answers):
    {extra}
    return float((submission["y"] == answers["y"]).mean())
'''


def _files(tmp_path, extra: str):
    code = tmp_path / f"grade_{len(list(tmp_path.glob('grade_*.py')))}.py"
    code.write_text(_GRADE.format(extra=extra))
    (tmp_path / "answers.csv").write_text("id,y\na,1\nb,0\nc,1\nd,1\n")
    (tmp_path / "sub.csv").write_text("id,y\na,1\nb,1\nc,1\nd,1\n")
    return code, tmp_path / "answers.csv", tmp_path / "sub.csv"


def test_a_patched_module_ends_with_its_run(tmp_path):
    code, ans, sub = _files(tmp_path, "pd.read_csv = None; pd.Series.mean = lambda self: 123.0")
    assert run_metric_code("mlebench", code, ans, sub).score == 123.0
    clean, ans, sub = _files(tmp_path, "pass")
    assert run_metric_code("mlebench", clean, ans, sub).score == 0.75


def test_a_run_that_kills_its_parent_fails_alone(tmp_path):
    code, ans, sub = _files(tmp_path, "os.kill(os.getppid(), signal.SIGKILL); time.sleep(5)")
    with pytest.raises(MetricCodeError):
        run_metric_code("mlebench", code, ans, sub, timeout_s=60)
    clean, ans, sub = _files(tmp_path, "pass")
    assert run_metric_code("mlebench", clean, ans, sub).score == 0.75


def test_a_run_past_its_limit_is_stopped_in_one_line(tmp_path):
    code, ans, sub = _files(tmp_path, "time.sleep(600)")
    with pytest.raises(MetricCodeError, match="ran longer than 3 s"):
        run_metric_code("mlebench", code, ans, sub, timeout_s=3)
    clean, ans, sub = _files(tmp_path, "pass")
    assert run_metric_code("mlebench", clean, ans, sub).score == 0.75


_LFS = "version https://git-lfs.github.com/spec/v1\noid sha256:" + "ab" * 32 + "\nsize 125841\n"
_MAE = '''from sklearn.metrics import mean_absolute_error


def grade(submission, answers):
    return float(mean_absolute_error(answers["y"], submission["y"]))
'''


def _lfs_checkout(tmp_path):
    """An MLE-bench checkout cloned without its LFS files: one competition whose leaderboard.csv is a pointer."""
    co = tmp_path / "mle-bench"
    comp = co / "mlebench" / "competitions" / "pointer-comp"
    comp.mkdir(parents=True)
    (co / "mlebench" / "__init__.py").write_text("")
    (co / "mlebench" / "competitions" / "__init__.py").write_text("")
    (comp / "grade.py").write_text(_MAE)
    (comp / "config.yaml").write_text("id: pointer-comp\nname: Pointer\ndescription: "
                                      "mlebench/competitions/pointer-comp/description.md\n"
                                      "dataset:\n  answers: pointer-comp/prepared/private/test.csv\n")
    (comp / "description.md").write_text("Predict y.\n")
    (comp / "leaderboard.csv").write_text(_LFS)
    return co


def test_an_lfs_pointer_board_is_refused_naming_git_lfs_pull(tmp_path):
    from wmrl.tasks.leaderboard import LeaderboardError, read_leaderboard
    from wmrl.tasks.loader import load_error, load_task

    co = _lfs_checkout(tmp_path)
    with pytest.raises(LeaderboardError, match="Git LFS pointer.*git lfs pull"):
        read_leaderboard(co / "mlebench" / "competitions" / "pointer-comp" / "leaderboard.csv")
    data = tmp_path / "mle-bench-data" / "pointer-comp" / "prepared"
    (data / "public").mkdir(parents=True)
    (data / "private").mkdir()
    rows = "".join(f"t{i},{i % 7 + 0.5}\n" for i in range(30))
    (data / "public" / "train.csv").write_text("id,f,y\n" + "".join(f"r{i},{i},{i % 7 + 0.5}\n" for i in range(60)))
    (data / "public" / "test.csv").write_text("id,f\n" + "".join(f"t{i},{i}\n" for i in range(30)))
    (data / "public" / "sample_submission.csv").write_text("id,y\n" + "".join(f"t{i},3.0\n" for i in range(30)))
    (data / "private" / "test.csv").write_text("id,y\n" + rows)
    with pytest.raises(Exception) as e:
        load_task(data.parent, search=[co])
    line = load_error(data.parent, e.value)
    assert "\n" not in line and "Git LFS pointer" in line and "git lfs pull" in line, line


def test_the_coverage_run_grades_beside_an_lfs_board_with_a_synthetic_one(tmp_path):
    from wmrl.tasks.e2e_coverage import run_coverage

    co = _lfs_checkout(tmp_path)
    (row,) = run_coverage(co, tmp_path / "out")
    assert row.loaded and row.graded_exactly, row
    assert "synthetic" in row.note and "LFS" in row.note, row
    assert (co / "mlebench" / "competitions" / "pointer-comp" / "leaderboard.csv").read_text() == _LFS



#: DSBench scripts whose format the coverage run must find: the column the code reads under a copied
#: ``--value`` default, an id column read only as a sort key, two binary targets scored by AUC, binary labels
#: scored by F1, and binary labels compared for accuracy (a sample of 0.5 is no label).
_DS_SCRIPTS = {
    "hardcoded-target": ("yield", "performance = mean_absolute_error(answers['Age'], predictions['Age'])"),
    "sort-key-id": ("open_channels", "answers = answers.sort_values('time')\npredictions = predictions.sort_values("
                    "'time')\nperformance = f1_score(answers[args.value].values, predictions[args.value].values, "
                    "average='macro')"),
    "two-binary-targets": ("Machine failure", "performance = (roc_auc_score(answers['EC1'], predictions['EC1']) + "
                           "roc_auc_score(answers['EC2'], predictions['EC2'])) / 2"),
    "binary-f1": ("target", "performance = f1_score(answers[args.value], predictions[args.value])"),
    "label-accuracy": ("Transported", "performance = (predictions[args.value] == answers[args.value]).mean()"),
}


@pytest.mark.parametrize("cid", sorted(_DS_SCRIPTS))
def test_dsbench_formats_the_code_reads_load_and_grade_exactly(cid, tmp_path):
    from wmrl.tasks.e2e_coverage import run_coverage

    ev = tmp_path / "DSBench" / "data_modeling" / "evaluation"
    ev.mkdir(parents=True)
    value, body = _DS_SCRIPTS[cid]
    (ev / f"{cid}_eval.py").write_text(dsbench_eval_script(body, value))
    (row,) = run_coverage(tmp_path / "DSBench", tmp_path / "out")
    assert row.loaded and row.graded_exactly, row


def test_labels_compared_by_own_code_get_a_label_sample(tmp_path):
    """A grade.py comparing labels in its own words (no metric wmrl recognises): no 0.5 in the sample."""
    from wmrl.tasks.e2e_coverage import run_coverage

    co = _lfs_checkout(tmp_path)
    (co / "mlebench" / "competitions" / "pointer-comp" / "grade.py").write_text(
        "def grade(submission, answers):\n    hits = [a == b for a, b in zip(submission['y'], answers['y'])]\n"
        "    return sum(hits) / len(hits)\n")
    (row,) = run_coverage(co, tmp_path / "out")
    assert row.loaded and row.graded_exactly and row.kind == "binlabels", row


def test_a_correlation_metric_gets_a_sample_it_can_score(tmp_path):
    """DSBench's phrase-matching script: Pearson's r, NaN for a constant sample submission."""
    from wmrl.tasks.e2e_coverage import run_coverage

    ev = tmp_path / "DSBench" / "data_modeling" / "evaluation"
    ev.mkdir(parents=True)
    body = ("from scipy.stats import pearsonr\n"
            "performance, p_value = pearsonr(predictions[args.value], answers[args.value])")
    (ev / "phrase-matching_eval.py").write_text(dsbench_eval_script(body, "score"))
    (row,) = run_coverage(tmp_path / "DSBench", tmp_path / "out")
    assert row.loaded and row.graded_exactly, row


def test_a_perturbed_submission_stays_in_the_answers_range(tmp_path):
    """A grade.py refusing predictions outside the target's range (MLE-bench's Pawpularity between 1 and 100)."""
    from wmrl.tasks.e2e_coverage import run_coverage

    co = _lfs_checkout(tmp_path)
    (co / "mlebench" / "competitions" / "pointer-comp" / "grade.py").write_text(
        "import numpy as np\n\n\ndef grade(submission, answers):\n"
        "    if not submission['y'].between(1, 100).all():\n        raise ValueError('y should be between 1 and 100')\n"
        "    return float(np.sqrt(np.mean((submission['y'] - answers['y']) ** 2)))\n")
    (row,) = run_coverage(co, tmp_path / "out")
    assert row.loaded and row.graded_exactly, row


def test_numeric_ids_where_the_code_converts_them(tmp_path):
    """A grade.py that sorts by the id as a number (MLE-Dojo's avazu-ctr-prediction)."""
    from wmrl.tasks.e2e_coverage import run_coverage

    co = _lfs_checkout(tmp_path)
    (co / "mlebench" / "competitions" / "pointer-comp" / "grade.py").write_text(
        "import numpy as np\n\n\ndef grade(submission, answers):\n"
        "    s = submission.assign(id=submission['id'].astype(float)).sort_values('id')\n"
        "    a = answers.assign(id=answers['id'].astype(float)).sort_values('id')\n"
        "    return float(np.mean(np.abs(s['y'].to_numpy() - a['y'].to_numpy())))\n")
    (row,) = run_coverage(co, tmp_path / "out")
    assert row.loaded and row.graded_exactly, row


def test_the_key_the_code_sorts_by_is_the_id_whatever_its_name(tmp_path):
    """MLE-Dojo's homesite-quote-conversion: the id is ``QuoteNumber``, read only as the key the code sorts by and
    named in its errors."""
    from wmrl.tasks.e2e_coverage import run_coverage

    co = _lfs_checkout(tmp_path)
    (co / "mlebench" / "competitions" / "pointer-comp" / "grade.py").write_text(
        "from sklearn.metrics import roc_auc_score\n\n\ndef grade(submission, answers):\n"
        "    missing = {'QuoteNumber', 'QuoteConversion_Flag'} - set(submission.columns)\n"
        "    if missing:\n"
        "        raise ValueError(f\"Missing required columns in submission: {', '.join(missing)}.\")\n"
        "    s = submission.sort_values(by='QuoteNumber')\n    a = answers.sort_values(by='QuoteNumber')\n"
        "    return float(roc_auc_score(a['QuoteConversion_Flag'], s['QuoteConversion_Flag']))\n")
    (row,) = run_coverage(co, tmp_path / "out")
    assert row.loaded and row.graded_exactly, row
