"""The coverage run's format search reads the columns a metric class names the way MLE-Dojo's classes do: a column
name kept on ``self`` from a parameter's default, an id column named by its position beside fixed names in a list,
a list of group columns beside the target, an error listing "columns found in submission", and a column the code
wants on both sides (the submission's columns a subset of the answers')."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from wmrl.tasks.e2e_coverage import error_columns
from wmrl.tasks.e2e_schema import Schema, code_roles, learn, schema_frames, seeds

#: Quora insincere questions' pattern: the answers' column is ``self.value`` (a parameter's default), the
#: submission's a fixed name.
_SELF_VALUE = '''
from sklearn.metrics import f1_score

class M(CompetitionMetrics):
    def __init__(self, value: str = "target", higher_is_better: bool = True):
        self.value = value

    def evaluate(self, y_true, y_pred):
        y_true = y_true.sort_values(by="qid")
        y_pred = y_pred.sort_values(by="qid")
        return f1_score(y_true[self.value], y_pred["prediction"])
'''

#: Jigsaw's pattern: the id column by position in a list beside ``self`` names, and identity columns looped over.
_GROUPS = '''
class M(CompetitionMetrics):
    def __init__(self, value: str = "prediction", toxicity_col: str = "toxicity"):
        self.value = value
        self.toxicity_col = toxicity_col
        self.identity_columns = ["male", "female", "christian", "muslim"]

    def evaluate(self, y_true, y_pred):
        id_col = y_true.columns[0]
        required_true_cols = [id_col, self.toxicity_col] + [c for c in self.identity_columns if c in y_true.columns]
        y_true_subset = y_true[required_true_cols].copy()
        merged = y_true_subset.merge(y_pred[[id_col, self.value]], on=id_col)
        return merged
'''


def test_a_column_name_kept_on_self_is_read_and_the_renamed_target_seeded(tmp_path: Path):
    (tmp_path / "metric.py").write_text(_SELF_VALUE)
    roles = code_roles(tmp_path / "metric.py")
    assert roles.answers == ["qid", "target"] and roles.submission == ["qid", "prediction"]
    (first, *_) = seeds(roles, "id", "target")
    assert first.id == "qid" and first.targets == ("prediction",) and first.answer_names == (("prediction", "target"),)


def test_a_positional_id_beside_fixed_names_and_group_columns(tmp_path: Path):
    (tmp_path / "metric.py").write_text(_GROUPS)
    roles = code_roles(tmp_path / "metric.py")
    assert "toxicity" in roles.answers and roles.submission == ["prediction"]
    assert {"male", "female", "christian", "muslim"} <= set(roles.answers)
    (first, *_) = seeds(roles, "id", "target")
    # the target's truth is the answers' one column outside the group list, not a group column
    assert first.targets == ("prediction",) and first.answer_names == (("prediction", "toxicity"),)
    assert set(first.answer_only) == {"male", "female", "christian", "muslim"}


def test_a_column_wanted_on_both_sides_becomes_shared():
    line = ("metric code m.py failed: mledojo.metrics.base.InvalidSubmissionError: Extra unexpected columns found in "
            "submission: class.")
    assert error_columns(line) == ["class"]
    schema = Schema("id", ("predicted",), submission_only=("class",))
    grown = learn(schema, error_columns(line), line, code_roles(Path("/nonexistent.py")))
    assert grown is not None and grown.shared == ("class",) and grown.submission_only == ()
    answers, gold, sample, _ = schema_frames(grown, "rle", [], np.random.default_rng(0))
    assert list(answers["class"]) == list(gold["class"]) == list(sample["class"])
    assert set(gold.columns) <= set(answers.columns)


def test_a_type_name_in_an_error_is_not_a_column():
    """Kuzushiji's check names the type it got (``<class 'float'>``); only the quoted column is one."""
    line = ("metric code m.py failed: mledojo.metrics.base.InvalidSubmissionError: Invalid data type in submission "
            "column 'labels' for image t0. Expected string, got <class 'float'>.")
    assert error_columns(line) == ["labels"]
