"""The grammar of the ``grammar-fail`` scaffold: pipelines that can fail the way agents' programs fail.

The ``grammar`` scaffold's pipelines all run, so a world model trained on them never has to predict
whether a program fails. This grammar keeps the same form (one ``make_pipeline(...)`` expression,
decoded canonically; :mod:`wmrl.models.grammar_lang`) but offers choices that real agents make and
that break on real execution, most of them only on some tasks:

* ``PCA(n_components=32)``: ``ValueError`` when the encoded table has fewer than 32 columns (the
  prompt's schema shows the width);
* ``FunctionTransformer(np.log1p)``: NaN (-inf at -1) where a feature is at or below -1, always after
  ``StandardScaler``/``RobustScaler`` and on some raw tables; every model but the trees that accept NaN
  then raises;
* ``PolynomialFeatures(degree=3)`` (and 2): the feature count grows as the width cubed: the memory limit
  on wide tables, the time limit for slow models;
* ``LogisticRegression(penalty='l1', solver='lbfgs')``: ``ValueError`` (lbfgs supports only l2);
  ``solver='liblinear'``: ``ValueError`` on multiclass tasks;
* ``MultinomialNB``: ``ValueError`` on negative features (after a standard or robust scaler, PCA or
  polynomial features of them, or on tables with negative values);
* ``LinearSVC``, ``RidgeClassifier``, ``SVC()`` and ``SGDClassifier`` with the hinge or perceptron loss
  have no ``predict_proba``: their decision scores are written as probabilities, which the grader
  refuses on a probability metric (invalid submission); fine on label metrics;
* ``SVC(probability=True)``, ``SVR``, 1000 unpruned trees, ``GradientBoosting*`` with 500 trees of
  depth 6, ``MLP*((256, 256), max_iter=1000)``: quadratic kernels, internal cross-validation, thousands
  of trees or epochs: the time limit on large or widened tables;
* ``TransformedTargetRegressor(func=np.log | np.log1p | np.sqrt, ...)``: ``ValueError`` on targets
  outside the function's domain; with an ``SGDRegressor`` on unscaled (or robust-scaled) features inside,
  ``exp``/``expm1`` of its huge predictions overflows to infinity (invalid submission); an
  extrapolating ``LinearRegression`` inside can overflow the same way.

Programs render with :func:`wmrl.tasks.harness.render_solution` and ``output="as_is"``: predictions are
written as the estimator returns them (no NaN replacement or probability clipping), as an agent's own
script writes them. Nothing is special-cased: every failure is the real exception, time-out or grader
verdict of the real execution.
"""
from __future__ import annotations

import functools

from wmrl.models.grammar_lang import call, expand, hp

#: Imports the rendered ``build_model()`` needs beyond :data:`wmrl.tasks.harness.HARNESS_IMPORTS`.
EXTRA_IMPORTS = ("from sklearn.naive_bayes import MultinomialNB",
                 "from sklearn.preprocessing import FunctionTransformer")

_SCALERS = ["", "StandardScaler(), ", "MinMaxScaler(), ", "RobustScaler(), "]
_FEATURES = ["", "PCA(n_components=0.95), ", "PCA(n_components=32), ", "FunctionTransformer(np.log1p), ",
             "PolynomialFeatures(degree=2), ", "PolynomialFeatures(degree=3), "]
_STEPS = (_SCALERS, _FEATURES)

_FOREST = (hp("n_estimators", ("100", "300", "1000")), hp("max_depth", ("8", "None")),
           hp("min_samples_leaf", ("1", "5")))
_HGB = (hp("max_iter", ("100", "300")), hp("learning_rate", ("0.05", "0.1", "0.3")), hp("max_leaf_nodes", ("15", "63")))
_GB = (hp("n_estimators", ("100", "500")), hp("learning_rate", ("0.05", "0.1")), hp("max_depth", ("3", "6")))
_KNN = (hp("n_neighbors", ("5", "15", "50")), hp("weights", ("'uniform'", "'distance'")))
_MLP = (hp("hidden_layer_sizes", ("(64,)", "(256, 256)")), hp("max_iter", ("200", "1000")))
_TREE = (hp("max_depth", ("4", "None")),)

_CLASSIFIERS = [
    call("LogisticRegression", hp("C", ("0.1", "1.0", "10.0")),
         ["solver='lbfgs'", "solver='liblinear'", "penalty='l1', solver='liblinear'", "penalty='l1', solver='lbfgs'"],
         "max_iter=1000"),
    call("RandomForestClassifier", *_FOREST),
    call("ExtraTreesClassifier", *_FOREST),
    call("HistGradientBoostingClassifier", *_HGB),
    call("GradientBoostingClassifier", *_GB),
    ("SVC(", *hp("C", ("0.1", "1.0", "10.0")), ["", ", probability=True"], ")"),
    call("LinearSVC", hp("C", ("0.1", "1.0", "10.0"))),
    call("KNeighborsClassifier", *_KNN),
    call("MultinomialNB", hp("alpha", ("0.1", "1.0"))),
    "GaussianNB()",
    call("SGDClassifier", hp("loss", ("'hinge'", "'log_loss'", "'modified_huber'", "'perceptron'")),
         hp("alpha", ("0.0001", "0.01"))),
    call("RidgeClassifier", hp("alpha", ("0.1", "1.0", "10.0"))),
    call("MLPClassifier", *_MLP),
    call("DecisionTreeClassifier", *_TREE),
]

_TARGET_TRANSFORMS = ["func=np.log, inverse_func=np.exp", "func=np.log1p, inverse_func=np.expm1",
                      "func=np.sqrt, inverse_func=np.square"]

_REGRESSORS = [
    call("Ridge", hp("alpha", ("0.1", "1.0", "10.0"))),
    call("Lasso", hp("alpha", ("0.01", "1.0")), hp("max_iter", ("1000", "10000"))),
    "LinearRegression()",
    call("SGDRegressor", hp("alpha", ("0.0001", "0.01"))),
    call("RandomForestRegressor", *_FOREST),
    call("ExtraTreesRegressor", *_FOREST),
    call("HistGradientBoostingRegressor", *_HGB),
    call("GradientBoostingRegressor", *_GB),
    call("SVR", hp("C", ("1.0", "10.0", "100.0"))),
    call("KNeighborsRegressor", *_KNN),
    call("MLPRegressor", *_MLP),
    call("DecisionTreeRegressor", *_TREE),
    call("TransformedTargetRegressor",
         hp("regressor", ("Ridge()", "LinearRegression()", "SGDRegressor()", "HistGradientBoostingRegressor()",
                          "KNeighborsRegressor()")),
         _TARGET_TRANSFORMS),
]

_MODELS = {"classifier": _CLASSIFIERS, "regressor": _REGRESSORS}


def fail_grammar(kind: str) -> tuple:
    """The ``grammar-fail`` grammar of ``make_pipeline(...)`` for one task kind, as nested values.

    An optional scaler (standard, min-max, robust), an optional feature step (PCA to 95% of the variance
    or to 32 components, ``log1p``, polynomial features of degree 2 or 3), then one of 14 classifier or
    13 regressor families with discrete hyperparameters (the module docstring says which choices fail
    where).

    Raises:
        KeyError: an unknown ``kind`` (``"classifier"`` or ``"regressor"``).
    """
    return ("make_pipeline(", _STEPS, _MODELS[kind], ")")


@functools.lru_cache(maxsize=8)
def fail_grammar_sentences(kind: str) -> tuple[str, ...]:
    """Every sentence of :func:`fail_grammar` for ``kind``, in the grammar's order (no duplicates).

    Returns:
        2,184 classifier or 2,016 regressor pipelines (24 preprocessing choices x 91 or 84 models).

    Raises:
        KeyError: an unknown ``kind``.
    """
    return tuple(dict.fromkeys(expand(fail_grammar(kind))))
