"""Finite grammars written as nested Python values, and their expansion into sentences.

A grammar scaffold's language is finite (a few thousand pipelines). It is written as nested values:

* a ``str`` is literal text;
* a ``tuple`` is a sequence (its parts concatenated in order);
* a ``list`` is a choice (exactly one alternative);
* a :class:`Number` is a choice among numbers written digit by digit (a numeric slot).

:func:`expand` lists every sentence; the policy decodes the canonical tokenization of each one
(:mod:`wmrl.models.choice_trie`), so only the choices carry log-probability. :func:`hp` and :func:`call`
build the usual pieces (``name=<choice>`` and ``Class(p1, p2, ...)``).

A grammar whose numeric slots are dense (every integer from 10 to 300, say) has far too many sentences to
list. :class:`Language` is its sentences as a sequence that is never materialised: its length is counted,
its i-th sentence is built from i (the order of :func:`expand`), membership is a regular-expression match,
and :meth:`wmrl.models.choice_trie.ChoiceTrie.from_sentences` compiles it from the grammar's skeletons
(:func:`skeletons`: the sentences with each numeric slot left open) instead of from its sentences.
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Number:
    """A choice among ``values``, decimal numbers written as literal text (``"137"``, ``"0.015"``).

    It is a choice like a ``list`` of the same strings; :meth:`ChoiceTrie.from_sentences
    <wmrl.models.choice_trie.ChoiceTrie.from_sentences>` decodes it digit by digit, so the values must be
    tokenized the same way wherever the slot occurs (checked when the trie is built).

    Raises:
        TypeError: ``values`` is a string or holds something else than strings.
        ValueError: no values, a duplicate, or a value that is not a decimal number as Python writes it (digits
            without a leading zero, one optional ``.`` between digits).
    """

    values: tuple[str, ...]

    def __post_init__(self) -> None:
        if isinstance(self.values, str) or not all(isinstance(v, str) for v in self.values):
            raise TypeError(f"a Number slot's values are a sequence of strings such as ('1', '2'), got {self.values!r}")
        object.__setattr__(self, "values", tuple(self.values))
        if not self.values:
            raise ValueError("a Number slot needs at least one value")
        if len(set(self.values)) != len(self.values):
            raise ValueError("the values of a Number slot must be distinct")
        bad = [v for v in self.values if not re.fullmatch(r"(0|[1-9][0-9]*)(\.[0-9]+)?", v)]
        if bad:
            raise ValueError("a Number slot holds decimal numbers as Python writes them (digits without a leading "
                             f"zero, one optional '.' between digits), got {bad[:3]}")


GrammarNode = str | tuple | list | Number


def hp(name: str, values: Sequence[str] | Number) -> tuple:
    """``name=`` followed by a choice of ``values`` (each literal text, e.g. ``"0.1"`` or ``"'l1'"``) or by a
    :class:`Number` slot."""
    return (f"{name}=", values if isinstance(values, Number) else list(values))


def call(cls: str, *params: GrammarNode) -> tuple:
    """``cls(`` + the ``params`` separated by ``", "`` + ``)``; each param is any grammar node."""
    parts: list = [f"{cls}("]
    for i, p in enumerate(params):
        parts.extend(([", "] if i else []) + (list(p) if isinstance(p, tuple) else [p]))
    return (*parts, ")")


def _not_a_node(node: object) -> TypeError:
    return TypeError(f"a grammar node is a str, tuple, list or Number, got {type(node).__name__}: {node!r}")


def expand(node: GrammarNode) -> list[str]:
    """Every sentence of ``node``, in the grammar's order (duplicates kept; the callers drop them).

    Raises:
        TypeError: a node that is not a ``str``, ``tuple``, ``list`` or :class:`Number`.
    """
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [s for alt in node for s in expand(alt)]
    if isinstance(node, Number):
        return list(node.values)
    if not isinstance(node, tuple):
        raise _not_a_node(node)
    out = [""]
    for part in node:
        out = [a + b for a in out for b in expand(part)]
    return out


def count(node: GrammarNode) -> int:
    """The number of sentences of ``node`` with duplicates, ``len(expand(node))``, without listing them."""
    if isinstance(node, str):
        return 1
    if isinstance(node, list):
        return sum(count(alt) for alt in node)
    if isinstance(node, Number):
        return len(node.values)
    if not isinstance(node, tuple):
        raise _not_a_node(node)
    return math.prod(count(part) for part in node)


def sentence_at(node: GrammarNode, index: int) -> str:
    """``expand(node)[index]`` without listing the sentences (mixed-radix digits of ``index``).

    Raises:
        IndexError: ``index`` outside ``[0, count(node))``.
    """
    n = count(node)
    if not 0 <= index < n:
        raise IndexError(f"sentence index {index} out of range for a grammar of {n} sentences")
    return _sentence_at(node, index)


def _sentence_at(node: GrammarNode, index: int) -> str:
    if isinstance(node, str):
        return node
    if isinstance(node, Number):
        return node.values[index]
    if isinstance(node, list):
        for alt in node:
            c = count(alt)
            if index < c:
                return _sentence_at(alt, index)
            index -= c
    out = []
    for part in reversed(node):  # the last part varies fastest, as in expand
        index, i = divmod(index, count(part))
        out.append(_sentence_at(part, i))
    return "".join(reversed(out))


def pattern(node: GrammarNode) -> str:
    """A regular expression that matches exactly the sentences of ``node`` (for :func:`re.fullmatch`)."""
    if isinstance(node, str):
        return re.escape(node)
    if isinstance(node, list):
        return "(?:" + "|".join(pattern(alt) for alt in node) + ")" if node else "(?!)"  # an empty choice: nothing
    if isinstance(node, Number):
        return "(?:" + "|".join(re.escape(v) for v in sorted(node.values, key=len, reverse=True)) + ")"
    if not isinstance(node, tuple):
        raise _not_a_node(node)
    return "".join(pattern(part) for part in node)


#: One skeleton of a grammar: literal text and open numeric slots, alternating (texts merged).
Skeleton = tuple[str | Number, ...]


def skeletons(node: GrammarNode) -> list[Skeleton]:
    """The grammar's sentences with every :class:`Number` left open, in the grammar's order (duplicates kept).

    A skeleton is a tuple of literal texts and :class:`Number` slots; adjacent texts are merged, so texts and
    slots alternate except where two slots meet.
    """
    if isinstance(node, str):
        return [(node,)] if node else [()]
    if isinstance(node, Number):
        return [(node,)]
    if isinstance(node, list):
        return [s for alt in node for s in skeletons(alt)]
    if not isinstance(node, tuple):
        raise _not_a_node(node)
    out: list[Skeleton] = [()]
    for part in node:
        out = [_join(a, b) for a in out for b in skeletons(part)]
    return out


def _join(a: Skeleton, b: Skeleton) -> Skeleton:
    if a and b and isinstance(a[-1], str) and isinstance(b[0], str):
        return (*a[:-1], a[-1] + b[0], *b[1:])
    return tuple(p for p in (*a, *b) if p != "")


class Language(Sequence[str]):
    """The sentences of a grammar, as a sequence that is never listed: ``len`` counts them, ``language[i]`` is
    ``expand(grammar)[i]`` (:func:`sentence_at`), ``text in language`` is a regular-expression match.

    ``random.Random(seed).choices(language, k=n)`` draws sentences uniformly, and
    :meth:`wmrl.models.choice_trie.ChoiceTrie.from_sentences` compiles the grammar's :func:`skeletons` instead
    of tokenizing every sentence (and refuses a grammar that produces a sentence twice). Iterating lists every
    sentence: only for small grammars.

    Args:
        grammar: the grammar node; it must not produce a sentence twice (``len`` counts derivations, so distinct
            sentences are the caller's guarantee, as for the tuples of sentences other scaffolds return).
    """

    def __init__(self, grammar: GrammarNode):
        self.grammar = grammar
        self._n = count(grammar)
        self._regex: re.Pattern[str] | None = None

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [_sentence_at(self.grammar, i) for i in range(*index.indices(self._n))]
        if not isinstance(index, int):
            raise TypeError(f"a Language is indexed by an int or a slice, got {type(index).__name__}")
        return sentence_at(self.grammar, index + self._n if index < 0 else index)

    def index(self, value: object, start: int = 0, stop: int | None = None) -> int:
        """Not offered: it would list the sentences one by one (use ``text in language``).

        Raises:
            TypeError: always.
        """
        raise TypeError("Language.index would list every sentence; test membership with `text in language`")

    def count(self, value: object) -> int:
        """1 for a sentence of the language, 0 otherwise (sentences are distinct: the caller's guarantee)."""
        return int(value in self)

    def __contains__(self, text: object) -> bool:
        if self._regex is None:
            self._regex = re.compile(pattern(self.grammar))
        return isinstance(text, str) and self._regex.fullmatch(text) is not None

    def __iter__(self) -> Iterator[str]:
        return (_sentence_at(self.grammar, i) for i in range(self._n))


#: The preprocessing the ``grammar`` and ``grammar-fine`` pipelines share, as a grammar node: nothing, a scaler
#: (standard, min-max, robust, quantile), or a scaler then PCA to 0.8 / 0.95 / 0.99 of the variance; each choice
#: ends with ``", "`` before the model.
SCALER = ["StandardScaler()", "MinMaxScaler()", "RobustScaler()", "QuantileTransformer(n_quantiles=100)"]
PREPROCESSING = ["", (SCALER, ", "), (SCALER, ", ", call("PCA", hp("n_components", ("0.8", "0.95", "0.99"))), ", ")]


def model_families(kind: str, *, penalty: Sequence[str] | Number, lasso_alpha: Sequence[str] | Number,
                   forest: tuple, hgb: tuple, gb: tuple, knn: tuple, tree: tuple) -> list:
    """The 8 model families of one task kind that the ``grammar-fine`` and ``grammar-dense`` grammars share, as a
    choice, each with the hyperparameter nodes given (a tuple of ``name=<choice>`` pieces per family).

    Args:
        kind: ``"classifier"`` (logistic regression, random forest, extra trees, histogram and classic gradient
            boosting, k-nearest neighbours, decision tree, Gaussian naive Bayes) or ``"regressor"`` (ridge, lasso
            and the same six non-linear families).
        penalty: the values of ``LogisticRegression``'s ``C`` and ``Ridge``'s ``alpha``.
        lasso_alpha: the values of ``Lasso``'s ``alpha``.
        forest, hgb, gb, knn, tree: the parameters of the random forest and extra trees, histogram gradient
            boosting, gradient boosting, k-nearest neighbours and decision tree.

    Raises:
        KeyError: an unknown ``kind``.
    """
    suffix = {"classifier": "Classifier", "regressor": "Regressor"}[kind]
    nonlinear = [call(f"RandomForest{suffix}", *forest), call(f"ExtraTrees{suffix}", *forest),
                 call(f"HistGradientBoosting{suffix}", *hgb), call(f"GradientBoosting{suffix}", *gb),
                 call(f"KNeighbors{suffix}", *knn), call(f"DecisionTree{suffix}", *tree)]
    if kind == "classifier":
        smoothing = ("1e-09", "1e-08", "1e-07", "1e-06", "1e-05", "0.0001", "0.001", "0.01")
        return [call("LogisticRegression", hp("C", penalty), "max_iter=1000"), *nonlinear,
                call("GaussianNB", hp("var_smoothing", smoothing))]
    return [call("Ridge", hp("alpha", penalty)), call("Lasso", hp("alpha", lasso_alpha), "max_iter=5000"), *nonlinear]
