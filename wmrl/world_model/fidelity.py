"""The fidelity card: how faithfully a world model predicts real executions it has not seen.

The WMRL paper scores its world model on held-out real executions with a fidelity harness; this card
is wmrl's version. :func:`fidelity_card` compares an :class:`~wmrl.world_model.outcome.OutcomePrediction` (or,
for a world model that predicts only rewards, its [N] rewards) with the executions' true outcome classes and
rewards, and gives each figure as a point value with a 95% bootstrap interval:

- ``status_acc1``: status accuracy at 1, the share of programs whose most likely predicted class
  (:attr:`OutcomePrediction.status`, ties to the first class of :data:`STATUS_CLASSES`) is the true class;
- ``status_acc2``: status accuracy at 2, the share whose true class is one of the two most likely classes;
- ``failure_auc``: ROC AUC of P(fail) = :attr:`OutcomePrediction.failure_prob` against "the program failed"
  (true class not ``valid``): the probability that a random failed program gets a higher P(fail) than a random
  valid one, ties counting one half (the Mann-Whitney U statistic over n_fail x n_valid; Hanley & McNeil 1982,
  "The meaning and use of the area under a ROC curve"). None when the truth holds one class only;
- ``ece``: the reward's expected calibration error: the programs are sorted by predicted reward and cut into
  ``ece_bins`` equal-mass bins (``numpy.array_split`` of the stable sort: bin sizes differ by at most one, ties
  in the prediction may straddle a bin edge; :func:`wmrl.world_model.metrics.bias_by_decile`), and
  ECE = sum over bins b of (n_b / N) * |mean predicted reward in b - mean true reward in b| (the equal-mass
  binning of Naeini, Cooper & Hauskrecht 2015, "Obtaining well calibrated probabilities using Bayesian
  binning"; the bin-share-weighted gap of Guo et al. 2017, "On calibration of modern neural networks", here on
  the reward scale instead of a class confidence). 0 = calibrated bin by bin;
- ``mae``: mean absolute error of the predicted reward;
- ``spearman``: Spearman rank correlation of predicted and true reward (None when either side is constant);
- ``pairwise_acc``: within-group pairwise accuracy, the share of pairs inside a group with different true
  rewards that the prediction orders the same way, ties 1/2
  (:func:`wmrl.world_model.metrics.pairwise_ranking_accuracy`; 0.5 = chance; what GRPO's group-relative
  advantages feel). None without such a pair;
- ``kendall_tau``: Kendall's tau-b of predicted against true reward inside each group, averaged over the groups
  where it is defined (two or more distinct values on both sides; :func:`wmrl.core.ranking.ranking_errors`):
  the order GRPO's advantages follow, which no monotone calibration of the score can change;
- ``favourite_regret``: per group of two or more programs, the best true reward minus the true reward of the
  program the world model rates highest (ties share), averaged over groups (reward units; 0 = the world model's
  favourite is always the best): what a policy that follows the world model's favourite loses.

Besides: ``n`` programs, ``n_groups``, ``n_dropped`` (rows without a true class: infrastructure errors, not the
program's outcome), ``n_pairs``, the truth's status mix (share per class), and the prediction's: the mean
predicted probability of each class (``pred_mix``) and the share of programs whose most likely class it is
(``pred_top_mix``). A world model without status probabilities gets None for the three status figures and the
prediction's mixes; its reward figures are computed as usual.

**Intervals: a cluster bootstrap over groups.** The programs of one GRPO group share a task, a step and a
policy, so their errors are correlated; resampling single programs would understate the spread. Each of
``n_boot`` resamples draws the groups with replacement (as many draws as there are groups; a group drawn twice
counts as two groups, its within-group pairs twice), recomputes every figure on the rows of the drawn groups,
and the interval is the 2.5th to 97.5th percentile of the resampled values (the percentile interval of Davison
& Hinkley 1997, "Bootstrap methods and their application", sec. 5.2; resampling whole clusters, their sec. 3.8,
and Field & Welsh 2007, "Bootstrapping clustered data"). Resamples in which a figure is undefined (e.g. one
class only, for the AUC) are left out of that figure's percentiles. The draws come from
``numpy.random.default_rng(seed)``: the same inputs and seed give the same intervals. With few groups the
intervals are wide and themselves uncertain; with one group they collapse to the point. A biased statistic can
sit outside its own percentile interval: resampling adds noise to each bin's means, so a resampled ECE tends to
exceed the point ECE of a well-calibrated model.

:class:`FidelityRows` collects a run's rows as they arrive (the trainer's anchors) and gives their card.
Pure numpy/scipy; nothing here loads a model.
"""
from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

import numpy as np

from wmrl.core.ranking import ranking_errors
from wmrl.world_model.metrics import bias_by_decile, pairwise_ranking_accuracy
from wmrl.world_model.outcome import STATUS_CLASSES, OutcomePrediction, status_index

__all__ = ["FIGURES", "LABELS", "Figure", "FidelityCard", "FidelityRows", "fidelity_card",
           "format_card", "format_figure"]

#: The card's figures, in the order they are shown.
FIGURES: tuple[str, ...] = ("status_acc1", "status_acc2", "failure_auc", "ece", "mae", "spearman", "pairwise_acc",
                            "kendall_tau", "favourite_regret")
#: What each figure is, as a row label.
LABELS: dict[str, str] = {
    "status_acc1": "status accuracy @1", "status_acc2": "status accuracy @2", "failure_auc": "failure AUC",
    "ece": "reward ECE", "mae": "reward MAE", "spearman": "Spearman", "pairwise_acc": "pairwise accuracy in groups",
    "kendall_tau": "Kendall tau-b in groups", "favourite_regret": "regret of the favourite in groups",
}
_VALID = status_index("valid")


@dataclass(frozen=True)
class Figure:
    """One figure of the card: ``value`` (None: undefined or unavailable) and its 95% bootstrap interval
    ``[lo, hi]`` (None without resamples, or when no resample defines it)."""

    value: float | None
    lo: float | None = None
    hi: float | None = None

    def to_dict(self) -> dict[str, float | None]:
        """``{"value": ..., "lo": ..., "hi": ...}``."""
        return {"value": self.value, "lo": self.lo, "hi": self.hi}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Figure:
        """The figure :meth:`to_dict` wrote (missing keys, or None: undefined)."""
        d = d or {}
        return cls(d.get("value"), d.get("lo"), d.get("hi"))


@dataclass(frozen=True)
class FidelityCard:
    """The fidelity card of a world model on N executed programs (see the module docstring for each figure).

    Attributes:
        n: programs with a true class (the rows the figures use). n_groups: their groups. n_dropped: rows
            without a true class (infrastructure errors), left out. n_pairs: within-group pairs with different
            true rewards.
        status_acc1 ... pairwise_acc: :class:`Figure` (:data:`FIGURES`).
        truth_mix: share of each class of :data:`STATUS_CLASSES` among the n programs.
        pred_mix, pred_top_mix: mean predicted probability of each class, share of programs whose most likely
            class it is; None without status probabilities.
        status_available: whether the prediction had status probabilities.
        n_boot, seed, ece_bins, level: the bootstrap's resamples and seed, the ECE's bins, the interval's level.
        notes: why a figure is None, in words.
    """

    n: int
    n_groups: int
    n_dropped: int
    n_pairs: int
    status_acc1: Figure
    status_acc2: Figure
    failure_auc: Figure
    ece: Figure
    mae: Figure
    spearman: Figure
    pairwise_acc: Figure
    kendall_tau: Figure
    favourite_regret: Figure
    truth_mix: dict[str, float]
    pred_mix: dict[str, float] | None
    pred_top_mix: dict[str, float] | None
    status_available: bool
    n_boot: int
    seed: int
    ece_bins: int
    level: float = 0.95
    notes: tuple[str, ...] = field(default=())

    def figure(self, name: str) -> Figure:
        """The figure ``name`` (one of :data:`FIGURES`); ``KeyError`` for another name."""
        if name not in FIGURES:
            raise KeyError(f"no figure {name!r}; the card has {', '.join(FIGURES)}")
        return getattr(self, name)

    def point_values(self) -> dict[str, float | None]:
        """``{figure: point value}`` for every figure of :data:`FIGURES`."""
        return {k: self.figure(k).value for k in FIGURES}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: the counts, ``figures`` ({name: {value, lo, hi}}), the mixes and the settings."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in FIGURES:
                out.setdefault("figures", {})[f.name] = v.to_dict()
            else:
                out[f.name] = list(v) if isinstance(v, tuple) else v
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FidelityCard:
        """The card :meth:`to_dict` wrote (e.g. a run's ``fidelity.json``).

        Raises:
            ValueError: ``d`` lacks a field of the card (the message names them).
        """
        figs = d.get("figures") or {}
        need = [f.name for f in fields(cls) if f.name not in FIGURES and f.default is MISSING
                and f.default_factory is MISSING and f.name not in d]
        if need:
            raise ValueError(f"not a fidelity card: missing {', '.join(need)}")
        kw: dict[str, Any] = {f.name: d[f.name] for f in fields(cls) if f.name not in FIGURES and f.name in d}
        kw["notes"] = tuple(kw.get("notes", ()))
        kw.update({k: Figure.from_dict(figs.get(k)) for k in FIGURES})
        return cls(**kw)


def _check_int(name: str, v: Any, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    return int(v)


def _auc(score: np.ndarray, positive: np.ndarray) -> float | None:
    """ROC AUC of ``score`` for ``positive`` (Mann-Whitney U / (n_pos n_neg), average ranks for ties); None
    with one class only."""
    from scipy.stats import rankdata  # noqa: PLC0415 - heavy (scipy)

    n_pos = int(positive.sum())
    n_neg = positive.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = rankdata(score)
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _spearman(p: np.ndarray, t: np.ndarray) -> float | None:
    from scipy.stats import spearmanr  # noqa: PLC0415 - heavy (scipy)

    if p.size < 2 or np.ptp(p) == 0 or np.ptp(t) == 0:
        return None
    return float(spearmanr(p, t).statistic)


def _ece(p: np.ndarray, t: np.ndarray, bins: int) -> float:
    return float(sum(b["n"] * abs(b["pred_mean"] - b["true_mean"]) for b in bias_by_decile(p, t, bins)) / p.size)


def _group_mean(per_group: np.ndarray) -> float | None:
    """The mean of the defined (finite) per-group values, None when no group defines it."""
    ok = np.isfinite(per_group)
    return float(per_group[ok].mean()) if ok.any() else None


class _Rows:
    """The checked rows of one card and the figures of any multiset of their groups."""

    def __init__(self, reward: np.ndarray, probs: np.ndarray | None, true: np.ndarray, cls: np.ndarray,
                 groups: list[Hashable], ece_bins: int):
        self.reward, self.probs, self.true, self.ece_bins = reward, probs, true, ece_bins
        self.fail = cls != _VALID
        if probs is not None:
            order = np.argsort(-probs, axis=1, kind="stable")  # ties: the first class of STATUS_CLASSES
            self.hit1 = order[:, 0] == cls
            self.hit2 = self.hit1 | (order[:, 1] == cls)
            self.p_fail = 1.0 - probs[:, _VALID]
        codes: dict[Hashable, int] = {}
        of_row = np.array([codes.setdefault(g, len(codes)) for g in groups], dtype=np.int64)
        self.members = [np.flatnonzero(of_row == k) for k in range(len(codes))]
        agree, pairs, taus, regrets = [], [], [], []
        for idx in self.members:  # a group's pairs never leave it: its counts are summed over the drawn groups
            acc, n = pairwise_ranking_accuracy(reward[idx], true[idx], [0] * idx.size)
            agree.append(acc * n if n else 0.0)
            pairs.append(n)
            rank = ranking_errors(np.zeros(idx.size, dtype=np.int64), true[idx], reward[idx])
            taus.append(math.nan if rank.kendall_tau is None else rank.kendall_tau)
            regrets.append(math.nan if rank.favourite_regret is None else rank.favourite_regret)
        self.agree, self.pairs = np.asarray(agree), np.asarray(pairs, dtype=np.int64)
        self.taus, self.regrets = np.asarray(taus), np.asarray(regrets)

    @property
    def n_groups(self) -> int:
        return len(self.members)

    def figures(self, drawn: np.ndarray) -> dict[str, float | None]:
        """Every figure on the rows of the groups ``drawn`` (group codes, repeats allowed)."""
        idx = np.concatenate([self.members[g] for g in drawn])
        p, t = self.reward[idx], self.true[idx]
        n_pairs = int(self.pairs[drawn].sum())
        out: dict[str, float | None] = {
            "status_acc1": None, "status_acc2": None, "failure_auc": None,
            "ece": _ece(p, t, self.ece_bins), "mae": float(np.abs(p - t).mean()), "spearman": _spearman(p, t),
            "pairwise_acc": float(self.agree[drawn].sum() / n_pairs) if n_pairs else None,
            "kendall_tau": _group_mean(self.taus[drawn]), "favourite_regret": _group_mean(self.regrets[drawn]),
        }
        if self.probs is not None:
            out.update(status_acc1=float(self.hit1[idx].mean()), status_acc2=float(self.hit2[idx].mean()),
                       failure_auc=_auc(self.p_fail[idx], self.fail[idx]))
        return out


def fidelity_card(pred: OutcomePrediction | Sequence[float] | np.ndarray, true_reward: Sequence[float] | np.ndarray,
                  true_class: Sequence[str | None], group_ids: Sequence[Hashable], *, n_boot: int = 1000,
                  seed: int = 0, ece_bins: int = 10) -> FidelityCard:
    """The fidelity card of a world model's predictions against N real executions (module docstring).

    Args:
        pred: the world model's :class:`OutcomePrediction` of the N programs, or their predicted rewards
            ([N] float, a world model without status probabilities: the status figures are then None).
        true_reward: [N] float, the executed reward (finite wherever ``true_class`` is given).
        true_class: N outcome classes (:func:`wmrl.world_model.outcome.outcome_class`), None for a row without
            one (an infrastructure error: dropped and counted in ``n_dropped``).
        group_ids: N hashable group keys (one GRPO group, e.g. ``(step, group)``): the bootstrap's clusters and
            the pairs of the pairwise accuracy.
        n_boot: bootstrap resamples (0: point values only, no intervals).
        seed: the bootstrap's seed.
        ece_bins: equal-mass bins of the ECE (fewer when there are fewer programs).

    Returns:
        A :class:`FidelityCard`.

    Raises:
        ValueError: lengths that differ, no row, no row with a true class, an unknown class, a true reward that
            is not finite on a row with a class, a non-finite predicted reward, ``n_boot < 0`` or
            ``ece_bins < 1``.
    """
    n_boot, ece_bins = _check_int("n_boot", n_boot, 0), _check_int("ece_bins", ece_bins, 1)
    if isinstance(pred, OutcomePrediction):
        reward, probs = pred.reward, pred.status_probs
    else:
        reward, probs = np.asarray(pred, dtype=np.float64), None
        if reward.ndim != 1:
            raise ValueError(f"pred must be an OutcomePrediction or [N] predicted rewards, got shape {reward.shape}")
        if not np.isfinite(reward).all():
            raise ValueError(f"{int((~np.isfinite(reward)).sum())} predicted rewards are not finite")
    true = np.asarray(true_reward, dtype=np.float64)
    n_all = reward.shape[0]
    if true.shape != (n_all,) or len(true_class) != n_all or len(group_ids) != n_all:
        raise ValueError(f"fidelity_card needs one true reward, true class and group id per prediction: got "
                         f"{n_all} predictions, true_reward of shape {true.shape}, {len(true_class)} classes, "
                         f"{len(group_ids)} group ids")
    if n_all == 0:
        raise ValueError("fidelity_card needs at least one executed program, got none")
    keep = np.array([c is not None for c in true_class], dtype=bool)
    if not keep.any():
        raise ValueError(f"none of the {n_all} rows has a true outcome class (all infrastructure errors?); "
                         "the card needs programs whose execution says how they did")
    cls = np.array([status_index(c) for c in true_class if c is not None], dtype=np.int64)
    k = np.flatnonzero(keep)
    true = true[k]
    if not np.isfinite(true).all():
        raise ValueError(f"{int((~np.isfinite(true)).sum())} rows with a true class have no finite true reward; "
                         "give the executed reward (the failure reward for a failed program), or true_class None")
    rows = _Rows(reward[k], None if probs is None else probs[k], true, cls, [group_ids[i] for i in k.tolist()],
                 ece_bins)
    point = rows.figures(np.arange(rows.n_groups))
    boot: dict[str, list[float]] = {f: [] for f in FIGURES}
    rng = np.random.default_rng(seed)
    for _ in range(n_boot):
        for f, v in rows.figures(rng.integers(0, rows.n_groups, size=rows.n_groups)).items():
            if v is not None and math.isfinite(v):
                boot[f].append(v)

    def fig(name: str) -> Figure:
        v = point[name]
        if v is None or not boot[name]:
            return Figure(v)
        lo, hi = np.percentile(boot[name], [2.5, 97.5])
        return Figure(v, float(lo), float(hi))

    notes = []
    if probs is None:
        notes.append("status figures unavailable: the world model gives no status probabilities")
    elif point["failure_auc"] is None:
        notes.append(f"failure AUC undefined: every program's true class is "
                     f"{'valid' if not rows.fail.any() else 'a failure'}")
    if point["spearman"] is None:
        notes.append("Spearman undefined: the predicted or the true rewards are constant")
    if point["pairwise_acc"] is None:
        notes.append("pairwise accuracy undefined: no group has two programs with different true rewards")
    if point["kendall_tau"] is None:
        notes.append("Kendall tau-b undefined: no group has two distinct predicted and two distinct true rewards")
    if point["favourite_regret"] is None:
        notes.append("regret of the favourite undefined: no group has two programs")
    counts = np.bincount(cls, minlength=len(STATUS_CLASSES))
    p = None if probs is None else probs[k]
    figures: dict[str, Any] = {f: fig(f) for f in FIGURES}  # Figure each, by the field's name
    return FidelityCard(
        n=int(k.size), n_groups=rows.n_groups, n_dropped=int(n_all - k.size), n_pairs=int(rows.pairs.sum()),
        **figures,
        truth_mix={c: float(counts[i] / k.size) for i, c in enumerate(STATUS_CLASSES)},
        pred_mix=None if p is None else {c: float(p[:, i].mean()) for i, c in enumerate(STATUS_CLASSES)},
        pred_top_mix=None if p is None else {
            c: float(np.mean(np.argmax(p, axis=1) == i)) for i, c in enumerate(STATUS_CLASSES)},
        status_available=probs is not None, n_boot=n_boot, seed=int(seed), ece_bins=ece_bins, notes=tuple(notes))


def format_figure(fig: Figure, digits: int = 3, interval: bool = True) -> str:
    """``"0.750 [0.700, 0.812]"`` (``interval=False`` or no interval: ``"0.750"``); ``"n/a"`` for None."""
    if fig.value is None:
        return "n/a"
    s = f"{fig.value:.{digits}f}"
    if interval and fig.lo is not None and fig.hi is not None:
        s += f" [{fig.lo:.{digits}f}, {fig.hi:.{digits}f}]"
    return s


def format_card(card: FidelityCard, title: str = "fidelity card") -> str:
    """The card as plain text (one figure a line, then the status mixes), for the command line and logs."""
    head = (f"{title}: {card.n} programs in {card.n_groups} groups"
            + (f" ({card.n_dropped} without an outcome class dropped: infrastructure errors)" if card.n_dropped else "")
            + (f"; {card.level:.0%} cluster-bootstrap intervals over groups, {card.n_boot} resamples, seed {card.seed}"
               if card.n_boot else "; point values (no bootstrap)"))
    labels = dict(LABELS, ece=f"reward ECE ({card.ece_bins} equal-mass bins)",
                  pairwise_acc=f"pairwise accuracy in groups (n_pairs = {card.n_pairs})")
    w = max(len(v) for v in labels.values())
    lines = [head] + [f"  {labels[f]:<{w}}  {format_figure(card.figure(f))}" for f in FIGURES]
    mixes = [("truth", card.truth_mix), ("predicted, mean probability", card.pred_mix),
             ("predicted, most likely class", card.pred_top_mix)]
    wm = max(len(m[0]) for m in mixes)
    lines.append(f"  {'status mix':<{wm}}  " + "  ".join(f"{c:>13}" for c in STATUS_CLASSES))
    for name, mix in mixes:
        if mix is not None:
            lines.append(f"  {name:<{wm}}  " + "  ".join(f"{mix[c]:>13.3f}" for c in STATUS_CLASSES))
    lines += [f"  note: {n}" for n in card.notes]
    return "\n".join(lines)


class FidelityRows:
    """A growing set of rows for :func:`fidelity_card` (a run's anchors, added step by step).

    ``add`` takes the rows' :class:`OutcomePrediction` or, for a world model without status probabilities,
    their predicted rewards; once reward-only rows were added the set has no status probabilities (its status
    figures are None). :meth:`state_dict` / :meth:`load_state_dict` keep it in a checkpoint (JSON-ready).
    """

    def __init__(self) -> None:
        self.reward: list[float] = []
        self.probs: list[list[float]] | None = []
        self.true_reward: list[float] = []
        self.true_class: list[str | None] = []
        self.groups: list[Hashable] = []

    def __len__(self) -> int:
        return len(self.reward)

    def add(self, pred: OutcomePrediction | Sequence[float] | np.ndarray, true_reward: Sequence[float] | np.ndarray,
            true_class: Sequence[str | None], group_ids: Sequence[Hashable]) -> None:
        """Append N rows (the arguments as in :func:`fidelity_card`).

        Raises:
            ValueError: lengths that differ, or an unknown class.
        """
        reward = pred.reward if isinstance(pred, OutcomePrediction) else np.asarray(pred, dtype=np.float64)
        n = int(reward.shape[0])
        if len(true_reward) != n or len(true_class) != n or len(group_ids) != n:
            raise ValueError(f"{n} predictions with {len(true_reward)} true rewards, {len(true_class)} classes and "
                             f"{len(group_ids)} group ids: give one of each per prediction")
        for c in true_class:
            if c is not None:
                status_index(c)
        self.reward += [float(x) for x in reward]
        if isinstance(pred, OutcomePrediction) and self.probs is not None:
            self.probs += pred.status_probs.tolist()
        else:
            self.probs = None
        self.true_reward += [float(x) for x in true_reward]
        self.true_class += list(true_class)
        self.groups += list(group_ids)

    def card(self, n_boot: int = 0, seed: int = 0, ece_bins: int = 10) -> FidelityCard | None:
        """:func:`fidelity_card` of the rows; None when no row has a true class yet."""
        if not any(c is not None for c in self.true_class):
            return None
        if self.probs is not None:
            p = np.asarray(self.probs, dtype=np.float64)
            pred: Any = OutcomePrediction(np.asarray(self.reward), p, np.zeros(len(self)))
        else:
            pred = np.asarray(self.reward)
        return fidelity_card(pred, np.asarray(self.true_reward, dtype=np.float64), self.true_class, self.groups,
                             n_boot=n_boot, seed=seed, ece_bins=ece_bins)

    def state_dict(self) -> dict[str, Any]:
        """The rows as JSON-ready lists (group keys that are tuples become lists)."""
        return {"reward": self.reward, "status_probs": self.probs, "true_reward": self.true_reward,
                "true_class": self.true_class, "groups": [list(g) if isinstance(g, tuple) else g for g in self.groups]}

    def load_state_dict(self, d: dict[str, Any] | None) -> None:
        """Restore :meth:`state_dict` (None or ``{}``: no rows). A true reward written as null reads as NaN."""
        d = d or {}
        self.reward = [float(x) for x in d.get("reward", [])]
        self.probs = d.get("status_probs", [])
        self.true_reward = [math.nan if x is None else float(x) for x in d.get("true_reward", [])]
        self.true_class = list(d.get("true_class", []))
        self.groups = [tuple(g) if isinstance(g, list) else g for g in d.get("groups", [])]
