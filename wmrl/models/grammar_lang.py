"""Finite grammars written as nested Python values, and their expansion into sentences.

A grammar scaffold's language is finite (a few thousand pipelines). It is written as nested values:

* a ``str`` is literal text;
* a ``tuple`` is a sequence (its parts concatenated in order);
* a ``list`` is a choice (exactly one alternative).

:func:`expand` lists every sentence; the policy decodes the canonical tokenization of each one
(:mod:`wmrl.models.choice_trie`), so only the choices carry log-probability. :func:`hp` and :func:`call`
build the usual pieces (``name=<choice>`` and ``Class(p1, p2, ...)``).
"""
from __future__ import annotations

from collections.abc import Sequence

GrammarNode = str | tuple | list


def hp(name: str, values: Sequence[str]) -> tuple:
    """``name=`` followed by a choice of ``values`` (each literal text, e.g. ``"0.1"`` or ``"'l1'"``)."""
    return (f"{name}=", list(values))


def call(cls: str, *params: GrammarNode) -> tuple:
    """``cls(`` + the ``params`` separated by ``", "`` + ``)``; each param is any grammar node."""
    parts: list = [f"{cls}("]
    for i, p in enumerate(params):
        parts.extend(([", "] if i else []) + (list(p) if isinstance(p, tuple) else [p]))
    return (*parts, ")")


def expand(node: GrammarNode) -> list[str]:
    """Every sentence of ``node``, in the grammar's order (duplicates kept; the callers drop them).

    Raises:
        TypeError: a node that is not a ``str``, ``tuple`` or ``list``.
    """
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [s for alt in node for s in expand(alt)]
    if not isinstance(node, tuple):
        raise TypeError(f"a grammar node is a str, tuple or list, got {type(node).__name__}: {node!r}")
    out = [""]
    for part in node:
        out = [a + b for a in out for b in expand(part)]
    return out


#: The preprocessing the ``grammar`` and ``grammar-fine`` pipelines share, as a grammar node: nothing, a scaler
#: (standard, min-max, robust, quantile), or a scaler then PCA to 0.8 / 0.95 / 0.99 of the variance; each choice
#: ends with ``", "`` before the model.
SCALER = ["StandardScaler()", "MinMaxScaler()", "RobustScaler()", "QuantileTransformer(n_quantiles=100)"]
PREPROCESSING = ["", (SCALER, ", "), (SCALER, ", ", call("PCA", hp("n_components", ("0.8", "0.95", "0.99"))), ", ")]
