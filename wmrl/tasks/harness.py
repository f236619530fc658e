"""The solution harness: turns a ``build_model()`` definition into a complete solution program.

:func:`render_solution` is the one way wmrl writes a runnable program around a model: the reference
pool behind the leaderboards uses it, and so do the ``function`` and ``grammar`` scaffolds of the
policy. The model source only has to define::

    def build_model():
        return make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=500))

returning an *unfitted* scikit-learn estimator or Pipeline (a classifier for binary and multiclass
tasks, a regressor for regression tasks). The names in :data:`HARNESS_IMPORTS` are imported by the
program before the model source runs, so the source can use them without imports (it may import
more itself).

What the rendered program does (working directory = the execution sandbox's working directory):

1. reads ``input/train.csv`` and ``input/test.csv``; splits off the target(s) and the id column;
2. encodes features with a ``ColumnTransformer``: numeric columns -> median imputation;
   other columns -> missing values as their own category ``"__missing__"`` +
   ``OneHotEncoder(handle_unknown="infrequent_if_exist",
   min_frequency=10, max_categories=32)``; the result is a dense float32 matrix ``[n_rows, n_features]``;
3. classification targets are encoded as integer codes ``0..K-1`` in ``task.classes`` order;
4. fits ``build_model()`` on the encoded training data and predicts what the task's metric needs:
   P(positive class) for binary probability metrics, one probability column per class for multiclass
   probability metrics, class labels for ``accuracy``/``macro_f1``, values for regression (a multi-target
   regression, :func:`template_misfit`, fits scikit-learn's ``MultiOutputRegressor`` around the model: one
   model per target, one value column each). Estimators
   without ``predict_proba`` fall back to ``decision_function`` (sigmoid/softmax), then to one-hot labels,
   and non-finite values are replaced (``output="guarded"``, the default); with ``output="as_is"`` the
   program writes what the estimator returns, unchanged, as an agent's own script would
   (:func:`render_solution`);
5. writes ``submission.csv`` in the format of ``input/sample_submission.csv``.
"""
from __future__ import annotations

import textwrap

from wmrl.tasks.layouts.common import count_rows, csv_header
from wmrl.tasks.metrics import prediction_kind, submission_columns
from wmrl.tasks.spec import Task

#: Names available to ``model_source`` without an import: name -> fully qualified object.
#: ``np`` and ``pd`` are the modules numpy and pandas; the rest are scikit-learn classes/functions.
HARNESS_IMPORTS: dict[str, str] = {
    "np": "numpy",
    "pd": "pandas",
    # pipelines and composition
    "Pipeline": "sklearn.pipeline.Pipeline",
    "make_pipeline": "sklearn.pipeline.make_pipeline",
    "TransformedTargetRegressor": "sklearn.compose.TransformedTargetRegressor",
    # linear models
    "LogisticRegression": "sklearn.linear_model.LogisticRegression",
    "RidgeClassifier": "sklearn.linear_model.RidgeClassifier",
    "SGDClassifier": "sklearn.linear_model.SGDClassifier",
    "LinearRegression": "sklearn.linear_model.LinearRegression",
    "Ridge": "sklearn.linear_model.Ridge",
    "Lasso": "sklearn.linear_model.Lasso",
    "ElasticNet": "sklearn.linear_model.ElasticNet",
    "HuberRegressor": "sklearn.linear_model.HuberRegressor",
    "SGDRegressor": "sklearn.linear_model.SGDRegressor",
    # trees and ensembles
    "DecisionTreeClassifier": "sklearn.tree.DecisionTreeClassifier",
    "DecisionTreeRegressor": "sklearn.tree.DecisionTreeRegressor",
    "RandomForestClassifier": "sklearn.ensemble.RandomForestClassifier",
    "RandomForestRegressor": "sklearn.ensemble.RandomForestRegressor",
    "ExtraTreesClassifier": "sklearn.ensemble.ExtraTreesClassifier",
    "ExtraTreesRegressor": "sklearn.ensemble.ExtraTreesRegressor",
    "GradientBoostingClassifier": "sklearn.ensemble.GradientBoostingClassifier",
    "GradientBoostingRegressor": "sklearn.ensemble.GradientBoostingRegressor",
    "HistGradientBoostingClassifier": "sklearn.ensemble.HistGradientBoostingClassifier",
    "HistGradientBoostingRegressor": "sklearn.ensemble.HistGradientBoostingRegressor",
    "AdaBoostClassifier": "sklearn.ensemble.AdaBoostClassifier",
    "AdaBoostRegressor": "sklearn.ensemble.AdaBoostRegressor",
    "BaggingClassifier": "sklearn.ensemble.BaggingClassifier",
    "BaggingRegressor": "sklearn.ensemble.BaggingRegressor",
    "VotingClassifier": "sklearn.ensemble.VotingClassifier",
    "VotingRegressor": "sklearn.ensemble.VotingRegressor",
    # neighbours, naive Bayes, SVMs, neural nets, baselines
    "KNeighborsClassifier": "sklearn.neighbors.KNeighborsClassifier",
    "KNeighborsRegressor": "sklearn.neighbors.KNeighborsRegressor",
    "GaussianNB": "sklearn.naive_bayes.GaussianNB",
    "BernoulliNB": "sklearn.naive_bayes.BernoulliNB",
    "SVC": "sklearn.svm.SVC",
    "SVR": "sklearn.svm.SVR",
    "LinearSVC": "sklearn.svm.LinearSVC",
    "LinearSVR": "sklearn.svm.LinearSVR",
    "MLPClassifier": "sklearn.neural_network.MLPClassifier",
    "MLPRegressor": "sklearn.neural_network.MLPRegressor",
    "DummyClassifier": "sklearn.dummy.DummyClassifier",
    "DummyRegressor": "sklearn.dummy.DummyRegressor",
    # preprocessing and feature selection
    "StandardScaler": "sklearn.preprocessing.StandardScaler",
    "MinMaxScaler": "sklearn.preprocessing.MinMaxScaler",
    "RobustScaler": "sklearn.preprocessing.RobustScaler",
    "QuantileTransformer": "sklearn.preprocessing.QuantileTransformer",
    "PolynomialFeatures": "sklearn.preprocessing.PolynomialFeatures",
    "SplineTransformer": "sklearn.preprocessing.SplineTransformer",
    "KBinsDiscretizer": "sklearn.preprocessing.KBinsDiscretizer",
    "PCA": "sklearn.decomposition.PCA",
    "TruncatedSVD": "sklearn.decomposition.TruncatedSVD",
    "SelectKBest": "sklearn.feature_selection.SelectKBest",
    "VarianceThreshold": "sklearn.feature_selection.VarianceThreshold",
    "f_classif": "sklearn.feature_selection.f_classif",
    "f_regression": "sklearn.feature_selection.f_regression",
}

#: Estimator names of :data:`HARNESS_IMPORTS` suited to each task type (for prompts and grammars).
CLASSIFIERS: tuple[str, ...] = tuple(
    n for n in HARNESS_IMPORTS if n.endswith(("Classifier", "NB", "SVC")) or n == "LogisticRegression"
)
REGRESSORS: tuple[str, ...] = tuple(
    n for n in HARNESS_IMPORTS
    if n.endswith(("Regressor", "Regression", "SVR")) and n != "LogisticRegression"
    or n in ("Ridge", "Lasso", "ElasticNet")
)
TRANSFORMERS: tuple[str, ...] = (
    "StandardScaler", "MinMaxScaler", "RobustScaler", "QuantileTransformer", "PolynomialFeatures",
    "SplineTransformer", "KBinsDiscretizer", "PCA", "TruncatedSVD", "SelectKBest", "VarianceThreshold",
)


def import_block() -> str:
    """The Python import statements that make :data:`HARNESS_IMPORTS` available (one per line)."""
    lines = []
    for name, path in HARNESS_IMPORTS.items():
        if "." not in path:
            lines.append(f"import {path} as {name}" if name != path else f"import {path}")
        else:
            module, obj = path.rsplit(".", 1)
            lines.append(f"from {module} import {obj}" if obj == name else f"from {module} import {obj} as {name}")
    return "\n".join(lines)


_TEMPLATE = '''\
# Solution program rendered by wmrl.tasks.harness for task {task_id!r}.
# Reads input/train.csv and input/test.csv, writes submission.csv.
import warnings
warnings.filterwarnings("ignore")
{imports}
from sklearn.compose import ColumnTransformer as _ColumnTransformer
from sklearn.impute import SimpleImputer as _SimpleImputer
from sklearn.preprocessing import OneHotEncoder as _OneHotEncoder
from sklearn.pipeline import make_pipeline as _make_pipeline
from sklearn.multioutput import MultiOutputRegressor as _MultiOutputRegressor

TASK_TYPE = {task_type!r}
PREDICTION = {kind!r}
TARGET = {target!r}
TARGETS = {targets!r}
ID_COLUMN = {id_column!r}
CLASSES = {classes!r}
SUBMISSION_COLUMNS = {columns!r}

# ---- model source (defines build_model) -------------------------------------------------
{model_source}
# ---- end of model source ----------------------------------------------------------------


def _encode_features(train, test):
    X = train.drop(columns=[*TARGETS, ID_COLUMN])
    X_test = test.drop(columns=[ID_COLUMN])[list(X.columns)]
    numeric = [c for c in X.columns if pd.api.types.is_numeric_dtype(X[c]) and not pd.api.types.is_bool_dtype(X[c])]
    categorical = [c for c in X.columns if c not in numeric]
    for frame in (X, X_test):
        for c in categorical:
            frame[c] = frame[c].astype("object").where(frame[c].notna(), "__missing__").astype(str)
    parts = []
    if numeric:
        parts.append(("num", _SimpleImputer(strategy="median", keep_empty_features=True), numeric))
    if categorical:
        parts.append(("cat", _OneHotEncoder(handle_unknown="infrequent_if_exist", min_frequency=10,
                                            max_categories=32, sparse_output=False), categorical))
    encoder = _ColumnTransformer(parts, remainder="drop", sparse_threshold=0.0)
    Xe = np.asarray(encoder.fit_transform(X), dtype=np.float32)
    Xte = np.asarray(encoder.transform(X_test), dtype=np.float32)
    return Xe, Xte


def _softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _class_probabilities(model, X, n_classes):
    """[n_rows, n_classes] probabilities in CLASSES order, whatever the estimator offers."""
    fitted = np.asarray(getattr(model, "classes_", np.arange(n_classes)))
    out = np.zeros((X.shape[0], n_classes), dtype=np.float64)
    if hasattr(model, "predict_proba"):
        try:
            p = np.asarray(model.predict_proba(X), dtype=np.float64)
            for j, c in enumerate(fitted):
                out[:, int(c)] = p[:, j]
            return out
        except (AttributeError, NotImplementedError):
            pass
    if hasattr(model, "decision_function"):
        d = np.asarray(model.decision_function(X), dtype=np.float64)
        if d.ndim == 1:
            p1 = 1.0 / (1.0 + np.exp(-np.clip(d, -50, 50)))
            out[:, int(fitted[0])] = 1.0 - p1
            out[:, int(fitted[-1])] = p1
            return out
        p = _softmax(d)
        for j, c in enumerate(fitted):
            out[:, int(c)] = p[:, j]
        return out
    labels = np.asarray(model.predict(X)).astype(int)
    out[np.arange(len(labels)), labels] = 1.0
    return out
{helpers}

def main():
    train = pd.read_csv("input/train.csv")
    test = pd.read_csv("input/test.csv")
    train = train[train[TARGETS].notna().all(axis=1)].reset_index(drop=True)
    X, X_test = _encode_features(train, test)
    model = build_model()
    if TASK_TYPE == "regression":
        if len(TARGETS) > 1:  # one model per target
            model = _MultiOutputRegressor(model)
            y = train[TARGETS].astype(np.float64).to_numpy()
        else:
            y = train[TARGET].astype(np.float64).to_numpy()
        model.fit(X, y)
        pred = np.asarray(model.predict(X_test), dtype=np.float64).reshape(len(X_test), len(TARGETS))
        y = y.reshape(len(y), len(TARGETS))
{regression_guard}        sub = pd.DataFrame(pred, columns=TARGETS)
        sub.insert(0, ID_COLUMN, test[ID_COLUMN].to_numpy())
    else:
        index = {{c: i for i, c in enumerate(CLASSES)}}
        y = train[TARGET].astype(str).map(index)
        if y.isna().any():
            raise ValueError("training labels outside the task's classes: "
                             + repr(sorted(set(train[TARGET].astype(str)) - set(CLASSES))[:5]))
        y = y.astype(int).to_numpy()
        model.fit(X, y)
        if PREDICTION == "label":
            codes = np.asarray(model.predict(X_test)).astype(int)
            sub = pd.DataFrame({{ID_COLUMN: test[ID_COLUMN], TARGET: [CLASSES[c] for c in codes]}})
        else:
{probability_block}            if TASK_TYPE == "binary":
                sub = pd.DataFrame({{ID_COLUMN: test[ID_COLUMN], TARGET: p[:, 1]}})
            else:
                sub = pd.DataFrame(p, columns=list(CLASSES))
                sub.insert(0, ID_COLUMN, test[ID_COLUMN].to_numpy())
    sub = sub[SUBMISSION_COLUMNS]
    sub.to_csv("submission.csv", index=False)
    print("wrote submission.csv:", sub.shape[0], "rows")


if __name__ == "__main__":
    main()
'''


#: How the rendered program turns the fitted model's output into the submission (:func:`render_solution`).
OUTPUT_MODES: tuple[str, ...] = ("guarded", "as_is")

# The output steps of each mode, filled into the template. ``guarded`` is the program wmrl always wrote: NaN and
# infinite values replaced, probabilities clipped to [0, 1] and renormalised, decision scores squashed.
_GUARDED = {
    "regression_guard": ("        for j in range(pred.shape[1]):\n"
                         "            pred[:, j] = np.nan_to_num(pred[:, j], nan=float(np.mean(y[:, j])), "
                         "posinf=float(np.max(y[:, j])), neginf=float(np.min(y[:, j])))\n"),
    "probability_block": ("            p = _class_probabilities(model, X_test, len(CLASSES))\n"
                          "            p = np.nan_to_num(p, nan=1.0 / len(CLASSES))\n"
                          "            p = np.clip(p, 0.0, 1.0)\n"
                          "            s = p.sum(axis=1, keepdims=True)\n"
                          "            p = np.where(s > 0, p / np.where(s > 0, s, 1.0), 1.0 / len(CLASSES))\n"),
    "helpers": "",
}

# ``as_is`` writes what the estimator returns, as an agent's own script does: ``predict_proba`` where the
# estimator has it, else its raw ``decision_function`` scores, else one-hot labels; values unchanged.
_AS_IS = {
    "regression_guard": "",
    "probability_block": "            p = _class_scores(model, X_test, len(CLASSES))\n",
    "helpers": '''

def _class_scores(model, X, n_classes):
    """[n_rows, n_classes] in CLASSES order, as the estimator gives them: predict_proba, else the raw
    decision_function scores (not probabilities), else one-hot labels. Nothing is clipped or replaced."""
    fitted = np.asarray(getattr(model, "classes_", np.arange(n_classes)))
    out = np.zeros((X.shape[0], n_classes), dtype=np.float64)
    if hasattr(model, "predict_proba"):
        p = np.asarray(model.predict_proba(X), dtype=np.float64)
    elif hasattr(model, "decision_function"):
        p = np.asarray(model.decision_function(X), dtype=np.float64)
        if p.ndim == 1:
            p = np.column_stack([-p, p])
    else:
        labels = np.asarray(model.predict(X)).astype(int)
        out[np.arange(len(labels)), labels] = 1.0
        return out
    for j, c in enumerate(fitted):
        out[:, int(c)] = p[:, j]
    return out
''',
}


def template_misfit(task: Task) -> str:
    """Why the program template of :func:`render_solution` cannot write ``task``'s submission, or ``""`` when it
    can. It writes one id column and one target (the task's type and metric fix the values), or, for a task whose
    submission is the sample submission's table (:attr:`~wmrl.tasks.spec.Task.outputs`), a multi-target
    regression: every output a column of ``train.csv`` that ``test.csv`` lacks, ``test.csv`` holding the id
    column and the sample submission one row per test row. Reads the three CSVs' headers and counts the test and
    sample rows.

    Returns:
        ``""``, or one line naming the submission's columns (e.g. text outputs, several rows per id).
    """
    if not task.outputs:
        return ""
    if task.type == "regression":
        train, test = csv_header(task.train_path), csv_header(task.test_path)
        if all(c in train and c not in test for c in task.outputs) and task.id_column in test \
                and count_rows(task.sample_submission_path) == count_rows(task.test_path):
            return ""
    return (f"its submission is the sample submission's table ({task.id_column}, {', '.join(task.outputs)}), "
            "graded by the benchmark's code; the program template writes one id column and one target, or the "
            "targets of a multi-target regression (train.csv's columns, one row per test row), not this")


def render_solution(task: Task, model_source: str, *, output: str = "guarded") -> str:
    """A complete standalone Python program solving ``task`` with the model of ``model_source``.

    Args:
        task: the task (its type, metric, target, id column and classes fix the program's I/O).
        model_source: Python source defining ``def build_model():`` that returns an unfitted
            scikit-learn estimator or Pipeline. It may use the names of :data:`HARNESS_IMPORTS`
            without importing them. It is inserted verbatim (dedented); broken source is not
            rejected here: the program then fails when run, which is the policy's doing.
        output: how predictions become the submission (one of :data:`OUTPUT_MODES`).
            ``"guarded"`` (the default, what the reference pool and the ``function`` and ``grammar``
            scaffolds use): non-finite regression values are replaced (NaN by the training mean, +-inf by
            the training maximum / minimum); class probabilities come from ``predict_proba``, else from
            ``decision_function`` through a sigmoid / softmax, else from one-hot labels, and are clipped to
            [0, 1] and renormalised. ``"as_is"``: the program writes what the estimator returns, unchanged,
            as an agent's own script does: regression values as predicted (NaN and infinities stay, and
            the grader refuses them), ``predict_proba`` where the estimator has it, else the raw
            ``decision_function`` scores (values outside [0, 1], which the grader refuses for a
            probability metric), else one-hot labels. Label predictions are the same in both modes.

    Returns:
        The program text (UTF-8 Python source). It reads ``input/train.csv`` and ``input/test.csv``
        relative to the working directory and writes ``submission.csv`` there, with the columns of
        :func:`wmrl.tasks.metrics.submission_columns` (the id column and the outputs of a multi-target
        regression).

    Raises:
        ValueError: the task's metric does not apply to its type (a broken task, not a broken model), the
            template cannot write the task's submission (:func:`template_misfit` says why), or ``output`` is
            not one of :data:`OUTPUT_MODES`.
    """
    if output not in OUTPUT_MODES:
        raise ValueError(f"output={output!r} is not an output mode; choose one of {', '.join(OUTPUT_MODES)}")
    why = template_misfit(task)
    if why:
        raise ValueError(f"task {task.id!r}: {why}")
    kind = prediction_kind(task.type, task.metric)
    columns = submission_columns(task.type, task.metric, task.id_column, task.target, task.classes, task.outputs)
    classes = [str(c) for c in task.classes]
    if task.type != "regression" and len(classes) < 2:
        raise ValueError(f"task {task.id!r} is {task.type} but lists {len(classes)} classes; "
                         "its task.yaml needs a 'classes' list")
    return _TEMPLATE.format(
        task_id=task.id,
        imports=import_block(),
        task_type=task.type,
        kind=kind,
        target=task.target,
        targets=list(task.outputs or (task.target,)),
        id_column=task.id_column,
        classes=classes,
        columns=columns,
        model_source=textwrap.dedent(model_source).strip("\n"),
        **(_GUARDED if output == "guarded" else _AS_IS),
    )
