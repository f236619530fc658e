"""The grammar of the ``grammar-dense`` scaffold: the ``grammar`` scaffold's pipelines with every numeric
hyperparameter dense (every integer of its range, learning rates to three decimals, penalties to two
significant digits), so that a policy which has settled on a model family rarely writes a program twice.

Agents that write free-form code rarely repeat a program exactly; the ``grammar`` scaffold's 3-4 values per
hyperparameter make a concentrating policy repeat itself, and ``grammar-fine``'s grids of 6-26 values still
let it repeat once it has settled (about a third of a ``wmrl`` run's world-model samples are programs it
already executed). Here the last digits of each number carry almost no reward signal (``n_estimators=137``
scores as ``138``), so under real rewards they stay spread while the policy learns the rest: a world model
answers few samples from the execution log and must predict the others. How rare repeats are depends on the
family: 640 uniform draws within one family repeat an earlier program in none of the four ensemble families
(4.5e6 to 1.4e8 programs each), 2-4 % of the time for the decision tree and the linear models, 9 % for k-nearest
neighbours and 79 % for ``GaussianNB`` (136 programs).

The language has about 1.6e8 sentences per task kind, far too many to list: :func:`dense_grammar_language`
returns it as a :class:`~wmrl.models.grammar_lang.Language` (counted, indexed and matched without listing)
and the policy decodes it by :meth:`~wmrl.models.choice_trie.ChoiceTrie.from_grammar` (each number digit by
digit, the canonical tokenization of every sentence).
"""
from __future__ import annotations

import functools

from wmrl.models.grammar_lang import PREPROCESSING, Language, Number, hp, model_families


def integers(lo: int, hi: int) -> Number:
    """Every integer from ``lo`` to ``hi`` (inclusive) as a :class:`Number` slot."""
    return Number(tuple(str(v) for v in range(lo, hi + 1)))


def decimals(lo: int, hi: int, places: int) -> Number:
    """``lo / 10**places`` to ``hi / 10**places`` in steps of ``10**-places``, written with ``places`` decimals."""
    return Number(tuple(f"{v / 10 ** places:.{places}f}" for v in range(lo, hi + 1)))


def two_digits(lo_exponent: int, hi_exponent: int) -> Number:
    """Numbers with two significant digits, 1.0e``lo_exponent`` to 9.9e``hi_exponent`` (``"0.0012"``, ``"4.7"``,
    ``"35"``): log-spaced penalties, 90 values per decade."""
    out = []
    for e in range(lo_exponent, hi_exponent + 1):
        for m in range(10, 100):
            places = max(0, 1 - e)
            out.append(f"{m * 10.0 ** (e - 1):.{places}f}")
    return Number(tuple(out))


_DEPTH = [integers(2, 30), "None"]
_LEAF = integers(1, 30)
_FOREST = (hp("n_estimators", integers(10, 300)), ("max_depth=", _DEPTH), hp("min_samples_leaf", _LEAF))
_HGB = (hp("max_iter", integers(10, 300)), hp("learning_rate", decimals(5, 300, 3)),
        hp("max_leaf_nodes", integers(2, 99)))
_GB = (hp("n_estimators", integers(10, 300)), hp("learning_rate", decimals(5, 300, 3)),
       hp("max_depth", integers(1, 8)))
_KNN = (hp("n_neighbors", integers(1, 99)), hp("weights", ("'uniform'", "'distance'")))
_TREE = (("max_depth=", _DEPTH), hp("min_samples_leaf", _LEAF))

_MODELS: dict[str, list] = {
    kind: model_families(kind, penalty=two_digits(-3, 2), lasso_alpha=two_digits(-3, 1),
                         forest=_FOREST, hgb=_HGB, gb=_GB, knn=_KNN, tree=_TREE)
    for kind in ("classifier", "regressor")
}


def dense_grammar(kind: str) -> tuple:
    """The ``grammar-dense`` grammar of ``make_pipeline(...)`` for one task kind, as nested values
    (:mod:`wmrl.models.grammar_lang`).

    The ``grammar`` scaffold's optional scaler and PCA, then one of its 8 model families per kind with each
    model's numeric hyperparameter a dense :class:`~wmrl.models.grammar_lang.Number` slot: ``n_estimators`` and
    ``max_iter`` 10-300, ``max_depth`` 2-30 or ``None`` (1-8 for gradient boosting), ``min_samples_leaf``
    1-30, ``max_leaf_nodes`` 2-99, ``n_neighbors`` 1-99, ``learning_rate`` 0.005-0.300 to three decimals,
    ``C`` and ``alpha`` from 0.0010 to 990 (``Lasso``: to 99) with two significant digits. Two stay listed:
    PCA's ``n_components`` (3 values, as in the ``grammar`` scaffold) and ``GaussianNB``'s ``var_smoothing``
    (8 powers of ten, written as Python writes them, ``1e-09``, which a slot of decimals cannot hold).

    Raises:
        KeyError: an unknown ``kind`` (``"classifier"`` or ``"regressor"``).
    """
    return ("make_pipeline(", PREPROCESSING, _MODELS[kind], ")")


@functools.lru_cache(maxsize=8)
def dense_grammar_language(kind: str) -> Language:
    """The sentences of :func:`dense_grammar` for ``kind``, as a :class:`~wmrl.models.grammar_lang.Language`
    (never listed; 164,149,654 classifier and 164,157,168 regressor pipelines).

    Raises:
        KeyError: an unknown ``kind``.
    """
    return Language(dense_grammar(kind))
