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


# The second stage of the format search: formats a real competitor's submission has beyond one id and one target,
# each in a grade.py written here after the shape of an MLE-bench competition (named in each docstring). The first
# stage is skipped (``MAX_TRIES`` 0) so that each test runs the format it is about.

@pytest.fixture
def second_stage(monkeypatch):
    import wmrl.tasks.e2e_coverage as cov

    monkeypatch.setattr(cov, "MAX_TRIES", 0)
    return cov


def _competition(tmp_path, grade: str, siblings: dict[str, str] | None = None, answers: str = "test.csv"):
    co = _lfs_checkout(tmp_path)
    comp = co / "mlebench" / "competitions" / "pointer-comp"
    (comp / "grade.py").write_text(grade)
    for name, text in (siblings or {}).items():
        (comp / name).write_text(text)
    if answers != "test.csv":
        cfg = (comp / "config.yaml").read_text().replace("private/test.csv", f"private/{answers}")
        (comp / "config.yaml").write_text(cfg)
    return co


_PROBS = '''import numpy as np
from sklearn.metrics import log_loss

from .breeds import BREEDS


def grade(submission, answers):
    if not all(b in submission.columns for b in BREEDS):
        raise ValueError(f"Submission must have columns for all breeds: {BREEDS}")
    if not np.allclose(submission[BREEDS].sum(axis=1), 1):
        raise ValueError("each row must sum to one")
    s, a = submission.sort_values("id"), answers.sort_values("id")
    return float(log_loss(a[BREEDS].to_numpy().argmax(axis=1), s[BREEDS].to_numpy(), labels=range(len(BREEDS))))
'''
#: A class list longer than any error line, written as one string split into lines (dog-breed-identification).
_BREEDS = 'BREEDS = """\n' + "\n".join(f"breed_number_{i:03d}" for i in range(40)) + '\n""".strip().split("\\n")\n'


def test_class_probabilities_from_a_class_list_in_a_sibling_module(second_stage, tmp_path):
    """dog-breed-identification: one probability column per class of a list in ``dogs.py``, each row summing to
    one; the list is longer than the error line that names it."""
    (row,) = second_stage.run_coverage(_competition(tmp_path, _PROBS, {"breeds.py": _BREEDS}), tmp_path / "out")
    assert row.kind == "probs" and row.loaded and row.graded_exactly, row


_MASKS = '''import numpy as np


def decode(rle, height, width):
    mask = np.zeros(height * width, dtype=bool)
    s = [int(x) for x in str(rle).split()]
    for start, length in zip(s[0::2], s[1::2]):
        assert start + length - 1 <= height * width, "run outside the image"
        mask[start - 1:start - 1 + length] = True
    return mask


def grade(submission, answers):
    expected_answer_columns = ["record_id", "encoded_pixels", "height", "width"]
    assert set(answers.columns) == set(expected_answer_columns), f"answers need {expected_answer_columns}"
    if set(submission.columns) != {"record_id", "encoded_pixels"}:
        raise ValueError("Submission must have columns record_id and encoded_pixels only")
    s, a = submission.sort_values("record_id"), answers.sort_values("record_id")
    p = np.concatenate([decode(r, int(h), int(w)) for r, h, w in zip(s["encoded_pixels"], a["height"], a["width"])])
    t = np.concatenate([decode(r, int(h), int(w)) for r, h, w in zip(a["encoded_pixels"], a["height"], a["width"])])
    return float(2 * (p & t).sum() / (p.sum() + t.sum()))
'''


def test_masks_with_the_image_sizes_only_the_answers_hold(second_stage, tmp_path):
    """google-research-identify-contrails: run-length-encoded masks; the answers alone hold each image's height
    and width, and the submission must hold exactly its id and mask."""
    (row,) = second_stage.run_coverage(_competition(tmp_path, _MASKS), tmp_path / "out")
    assert row.kind == "rle" and row.loaded and row.graded_exactly, row


_RENAMED = _MASKS.replace('''    expected_answer_columns = ["record_id", "encoded_pixels", "height", "width"]
    assert set(answers.columns) == set(expected_answer_columns), f"answers need {expected_answer_columns}"
    if set(submission.columns) != {"record_id", "encoded_pixels"}:
        raise ValueError("Submission must have columns record_id and encoded_pixels only")
''', '''    if "predicted" not in submission.columns:
        raise ValueError("Submission is missing the 'predicted' column")
    assert "encoding" in answers.columns, "Answers is missing the 'encoded' column"
    assert "width" in answers.columns and "height" in answers.columns, "answers need the image sizes"
''').replace('s["encoded_pixels"]', 's["predicted"]').replace('a["encoded_pixels"]', 'a["encoding"]')


def test_a_target_the_answers_hold_under_another_name(second_stage, tmp_path):
    """hubmap-kidney-segmentation: the submission's ``predicted`` masks are the answers' ``encoding`` (and the
    code's error names a third spelling)."""
    (row,) = second_stage.run_coverage(_competition(tmp_path, _RENAMED), tmp_path / "out")
    assert row.kind == "rle" and row.loaded and row.graded_exactly, row


_CONFIDENCE = '''import numpy as np


def grade(submission, answers):
    for c in ("Patient_Week", "FVC"):
        assert c in answers.columns, f"Answers DataFrame must have a '{c}' column."
    for c in ("Patient_Week", "FVC"):
        if c not in submission.columns:
            raise ValueError(f"Submission DataFrame must have a '{c}' column.")
    if "Confidence" not in submission.columns:
        raise ValueError("Submission DataFrame must have a 'Confidence' column.")
    s, a = submission.sort_values(by="Patient_Week"), answers.sort_values(by="Patient_Week")
    sd = np.maximum(s["Confidence"].to_numpy(), 70)
    delta = np.minimum(np.abs(a["FVC"].to_numpy() - s["FVC"].to_numpy()), 1000)
    return float(np.mean(-np.sqrt(2) * delta / sd - np.log(np.sqrt(2) * sd)))
'''


def test_a_column_only_the_submission_holds(second_stage, tmp_path):
    """osic-pulmonary-fibrosis-progression: the submission holds a ``Confidence`` beside the target that the
    answers do not; the code names it only in its error."""
    (row,) = second_stage.run_coverage(_competition(tmp_path, _CONFIDENCE), tmp_path / "out")
    assert row.loaded and row.graded_exactly, row


_BOXES = '''import numpy as np


def parse(s):
    toks = str(s).split()
    if len(toks) % 6:
        raise ValueError(f"PredictionString must have 6 tokens per box, got {len(toks)}")
    return [(toks[i], float(toks[i + 1]), *map(float, toks[i + 2:i + 6])) for i in range(0, len(toks), 6)]


def iou(a, b):
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h
    return w * h / union if union > 0 else 0.0


def grade(submission, answers):
    if "PredictionString" not in submission.columns:
        raise ValueError("Submission must have a 'PredictionString' column")
    s, a = submission.sort_values("id"), answers.sort_values("id")
    hits = []
    for ps, ts in zip(s["PredictionString"], a["PredictionString"]):
        truth = parse(ts)
        for label, conf, *box in parse(ps):
            hits.append(any(t[0] == label and iou(box, t[2:]) > 0.5 for t in truth))
    return float(np.mean(hits))
'''


def test_box_prediction_strings(second_stage, tmp_path):
    """siim-covid19-detection: ``label confidence x_min y_min x_max y_max`` per box in one string."""
    (row,) = second_stage.run_coverage(_competition(tmp_path, _BOXES), tmp_path / "out")
    assert row.kind == "boxes" and row.loaded and row.graded_exactly, row


_POINTS = '''import numpy as np


def hits(pred, truth):
    p, t = str(pred).split(), str(truth).split()
    if len(p) % 3 or len(t) % 5:
        raise ValueError("Malformed prediction string")
    found = 0
    for i in range(0, len(t), 5):
        label, x, y, w, h = t[i], *map(float, t[i + 1:i + 5])
        found += any(p[j] == label and x < float(p[j + 1]) < x + w and y < float(p[j + 2]) < y + h
                     for j in range(0, len(p), 3))
    return found / (len(t) // 5)


def grade(submission, answers):
    if not {"image_id", "labels"}.issubset(submission.columns):
        raise ValueError("Submission must have columns 'image_id' and 'labels'.")
    s, a = submission.sort_values("image_id"), answers.sort_values("image_id")
    return float(np.mean([hits(p, t) for p, t in zip(s["labels"], a["labels"])]))
'''


def test_boxes_answered_by_their_centres(second_stage, tmp_path):
    """kuzushiji-recognition: the answers hold ``label x y width height`` boxes, a submission each one's label
    and a point inside it (``label x y``)."""
    (row,) = second_stage.run_coverage(_competition(tmp_path, _POINTS), tmp_path / "out")
    assert row.kind == "points" and row.loaded and row.graded_exactly, row


_WORDSETS = '''from sklearn.metrics import f1_score
from sklearn.preprocessing import MultiLabelBinarizer


def grade(submission, answers):
    assert "image" in answers.columns and "labels" in answers.columns, "Answers must have 'image' and 'labels'"
    s, a = submission.sort_values(by="image"), answers.sort_values(by="image")
    classes = sorted(set(a["labels"].str.split().explode()))
    mlb = MultiLabelBinarizer(classes=classes)
    y = mlb.fit_transform(a["labels"].str.split())
    p = mlb.transform(s["labels"].fillna("").str.split())
    return float(f1_score(y, p, average="micro"))
'''


def test_label_sets_of_words(second_stage, tmp_path):
    """plant-pathology-2021-fgvc8: each row's labels are space-separated words."""
    (row,) = second_stage.run_coverage(_competition(tmp_path, _WORDSETS), tmp_path / "out")
    assert row.loaded and row.graded_exactly, row


_CLASSED = '''import numpy as np

column_order = ["overall", "C1", "C2", "C3"]


def wide(df):
    d = df.copy()
    d[["study", "part"]] = d["row_id"].str.split("_", n=1, expand=True)
    return d.pivot(index="study", columns="part", values="fractured").sort_index()


def grade(submission, answers):
    if "row_id" not in submission.columns or "fractured" not in submission.columns:
        raise ValueError("Submission is missing the `row_id` or the `fractured` column.")
    if not submission["fractured"].between(0, 1).all():
        raise ValueError("fractured must lie in [0, 1]")
    s, a = wide(submission), wide(answers)
    return float(np.mean(np.abs(s[column_order].to_numpy() - a[column_order].to_numpy())))
'''


def test_ids_that_join_a_group_and_a_class(second_stage, tmp_path):
    """rsna-2022-cervical-spine-fracture-detection: ids ``<study>_<part>``, split and pivoted to one column per
    part of the code's list."""
    (row,) = second_stage.run_coverage(_competition(tmp_path, _CLASSED), tmp_path / "out")
    assert row.loaded and row.graded_exactly, row


_LOG_MAE = '''import numpy as np


def grade(submission, answers):
    for c in ("id", "y", "type"):
        assert c in answers.columns, f"{c} column not found in answers"
    if "y" not in submission.columns:
        raise ValueError("y column not found in submission")
    m = answers.merge(submission[["id", "y"]], on="id", suffixes=("_true", "_pred"))
    return float(np.mean([np.log(np.mean(np.abs(g["y_true"] - g["y_pred"]))) for _, g in m.groupby("type")]))
'''


def test_a_score_infinite_for_perfect_answers(tmp_path):
    """champs-scalar-coupling: the log of a mean absolute error, -inf for the answers themselves; the
    competition loads (the best of the synthetic board is the perturbed submission's score)."""
    from wmrl.tasks.e2e_coverage import run_coverage

    (row,) = run_coverage(_competition(tmp_path, _LOG_MAE), tmp_path / "out")
    assert row.loaded and row.graded_exactly, row


def test_answers_that_are_not_a_table_are_refused_naming_them(tmp_path):
    """tensorflow2-question-answering: ``dataset.answers`` is ``test.jsonl``, records MLE-bench's
    ``load_answers`` parses for ``grade``; the loader and the coverage row say so in one line."""
    from wmrl.tasks.e2e_coverage import run_coverage

    (row,) = run_coverage(_competition(tmp_path, _MAE, answers="test.jsonl"), tmp_path / "out")
    assert not row.loaded and "test.jsonl" in row.reason and "CSV" in row.reason and "\n" not in row.reason, row


def test_the_refusal_keeps_the_most_telling_error(second_stage, tmp_path):
    """An error about the values (every column it names was there) outranks the later ones about missing
    columns; names of a Python ``AttributeError`` are not read as columns."""
    grade = ("def grade(submission, answers):\n"
             "    values = submission[submission.columns[-1]]\n"
             "    if values.isin([0, 1]).all():\n"
             "        raise ValueError('0/1 values cannot be ranked by this metric')\n"
             "    raise KeyError('never.there')\n")
    (row,) = second_stage.run_coverage(_competition(tmp_path, grade), tmp_path / "out")
    assert not row.loaded and "0/1 values cannot be ranked" in row.reason, row
    assert second_stage.error_columns("failed: AttributeError: 'DataFrame' object has no attribute 'applymap'") == []


def test_code_calling_a_removed_library_api_is_refused_naming_it(second_stage, tmp_path):
    """tgs-salt-identification-challenge calls ``DataFrame.applymap``, which pandas 3 removed (here
    ``DataFrame.append``, removed in pandas 2): whatever the format, the refusal names the API and the versions."""
    grade = ("def grade(submission, answers):\n"
             "    both = submission.append(answers)\n"
             "    return float(len(both))\n")
    (row,) = second_stage.run_coverage(_competition(tmp_path, grade), tmp_path / "out")
    assert not row.loaded and "API removed from the installed libraries" in row.reason, row
    assert "'append'" in row.reason and "pandas " in row.reason and "\n" not in row.reason, row


def test_code_roles_read_each_side_and_scope_loop_variables(tmp_path):
    """vinbigdata-chest-xray-abnormalities-detection reuses one loop variable over the answers' and the
    submission's column lists: each loop's names go to its own side."""
    from wmrl.tasks.e2e_schema import code_roles

    code = tmp_path / "grade.py"
    code.write_text("ANSWER_COLUMNS = ['class_id', 'x_min', 'image_id']\n\n\n"
                    "def grade(submission, answers, id_col='image_id'):\n"
                    "    for col in ANSWER_COLUMNS:\n        assert col in answers.columns\n"
                    "    for col in ['PredictionString', id_col]:\n"
                    "        if col not in submission.columns:\n            raise ValueError(col)\n"
                    "    return float(len(submission.sort_values(id_col)))\n")
    roles = code_roles(code)
    assert roles.answers == ["class_id", "x_min", "image_id"], roles
    assert roles.submission == ["PredictionString", "image_id"] and roles.keys == ["image_id"], roles
