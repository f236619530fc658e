"""The grammar of the ``grammar-fine`` scaffold: the ``grammar`` scaffold's pipelines with fine-grained
numeric hyperparameters, so that a policy which has settled on a model family still writes new programs.

The ``grammar`` scaffold offers 3-4 values per hyperparameter; a policy that concentrates on a family then
writes the *same* program again and again, and a world model can answer those repeats from the execution
log (recall) instead of predicting them. Agents that write free-form code rarely repeat a program exactly.
This grammar keeps the ``grammar`` scaffold's form (one ``make_pipeline(...)`` expression, the same
preprocessing and the same 8 model families per task kind, all of them valid programs) but spreads every
numeric hyperparameter over a grid of 6-26 values (``n_estimators`` in steps of 25, ``learning_rate`` in
13 steps from 0.01 to 0.3, ``C`` and ``alpha`` over 26 log-spaced values, ...). Numbers are decoded digit
by digit under the canonical tokenization, so each digit is a choice of the policy: the language has
about 46,000 sentences per task kind (15x the ``grammar`` scaffold's), and two samples of a concentrated
policy coincide far less often.
"""
from __future__ import annotations

import functools

from wmrl.models.grammar_lang import PREPROCESSING, expand, hp, model_families


def _steps(start: int, stop: int, step: int) -> tuple[str, ...]:
    return tuple(str(v) for v in range(start, stop + 1, step))


#: 26 log-spaced values from 0.001 to 100 (C, alpha).
_LOG_GRID = ("0.001", "0.002", "0.003", "0.005", "0.007", "0.01", "0.02", "0.03", "0.05", "0.07", "0.1", "0.2",
             "0.3", "0.5", "0.7", "1.0", "1.5", "2.0", "3.0", "5.0", "7.0", "10.0", "20.0", "30.0", "50.0", "100.0")
_LEARNING_RATE = ("0.01", "0.02", "0.03", "0.04", "0.05", "0.06", "0.08", "0.1", "0.12", "0.15", "0.2", "0.25", "0.3")
_LEAF = ("1", "2", "3", "5", "8", "12")

_FOREST = (hp("n_estimators", _steps(25, 250, 25)), hp("max_depth", ("4", "6", "8", "10", "12", "16", "20", "None")),
           hp("min_samples_leaf", _LEAF))
_HGB = (hp("max_iter", _steps(25, 300, 25)), hp("learning_rate", _LEARNING_RATE),
        hp("max_leaf_nodes", ("7", "11", "15", "23", "31", "47", "63")))
_GB = (hp("n_estimators", _steps(25, 250, 25)), hp("learning_rate", _LEARNING_RATE[:8]),
       hp("max_depth", _steps(1, 6, 1)))
_KNN = (hp("n_neighbors", _steps(1, 20, 1) + _steps(25, 50, 5)), hp("weights", ("'uniform'", "'distance'")))
_TREE = (hp("max_depth", _steps(2, 20, 1) + ("None",)), hp("min_samples_leaf", _LEAF))

_MODELS: dict[str, list] = {
    kind: model_families(kind, penalty=_LOG_GRID, lasso_alpha=_LOG_GRID[:21],
                         forest=_FOREST, hgb=_HGB, gb=_GB, knn=_KNN, tree=_TREE)
    for kind in ("classifier", "regressor")
}



def fine_grammar(kind: str) -> tuple:
    """The ``grammar-fine`` grammar of ``make_pipeline(...)`` for one task kind, as nested values
    (:mod:`wmrl.models.grammar_lang`).

    The ``grammar`` scaffold's optional scaler and PCA, then one of its 8 model families per kind with each
    numeric hyperparameter on a fine grid (module docstring).

    Raises:
        KeyError: an unknown ``kind`` (``"classifier"`` or ``"regressor"``).
    """
    return ("make_pipeline(", PREPROCESSING, _MODELS[kind], ")")


@functools.lru_cache(maxsize=8)
def fine_grammar_sentences(kind: str) -> tuple[str, ...]:
    """Every sentence of :func:`fine_grammar` for ``kind``, in the grammar's order (no duplicates).

    Returns:
        46,546 classifier or 46,767 regressor pipelines (17 preprocessing choices x 2,738 or 2,751 models).

    Raises:
        KeyError: an unknown ``kind``.
    """
    return tuple(dict.fromkeys(expand(fine_grammar(kind))))
