"""Evaluation protocols: named, typed settings of ``wmrl eval`` that make its numbers comparable with a table.

A protocol fixes what a table's numbers depend on: the competitions (a split of ids, each with a category),
samples per task, turns per episode, the sampling temperature, the per-turn token and time budgets, how an
episode is scored (its final submission or its best turn) and the score of a failure. Its aggregation is
fixed too (:func:`aggregate`)::

    sample score   s_ti = the sample's graded reward (leaderboard percentile), or failure_score when the sample
                   has no graded submission (a failed program; an infrastructure failure counts the same and
                   makes the result not comparable, never excluded; a competition whose submission the agent's
                   scaffold cannot write scores failure_score on every sample, without running, as the reference
                   implementation scores a failed submission)
    avg@k          A_t  = (1 / k) * sum_i s_ti                       (k = samples_per_task, every sample counted)
    category mean  C_c  = mean of A_t over the tasks t of category c
    overall             = mean of the C_c (``overall: category_mean``, the WMRL paper's "Avg")
                          or mean of the A_t (``overall: task_mean``)

``default`` is ``wmrl eval`` without a protocol: the run's own tasks and eval settings, the plain
means of :func:`wmrl.training.evaluation.summarize_eval`. ``paper`` is the MLE-Dojo test table of the WMRL paper
(*Scaling Automatic Research Agents via World Models*; README, "Citation"), settings read from its public reference
implementation
(docs/training.md, "Evaluation protocols"). Register your own with :func:`register_protocol`, or pass a YAML
file of the same fields to ``wmrl eval --protocol FILE.yaml`` (:func:`load_protocol`).
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from wmrl.core.registry import Registry
from wmrl.runs.config import (ConfigError, Float, Int, OptFloat, OptIds, _errors_text, _nullable,
                              _require_finite, _yaml_error_text, load_yaml)

OptInt = Annotated[Int | None, BeforeValidator(_nullable)]

#: The names :func:`register_protocol` will not replace.
BUILTIN = ("default", "paper")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
#: The category of every task when a protocol names none.
ALL = "all"


class EvalProtocol(BaseModel):
    """One evaluation protocol (module docstring). Unset (null) settings fall back to the run's config.

    Built in Python, bad values raise pydantic's ``ValidationError``; loaded from a mapping or a YAML file
    (:func:`protocol_from_dict`, :func:`load_protocol`), a :class:`~wmrl.training.config.ConfigError` naming
    the key, the value and what is allowed.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(..., description=(
        "The protocol's name (letters, digits, '_', '.', '-'), as `--protocol` takes it."))
    description: str = Field("", description="What the protocol reproduces, in one sentence.")
    source: str = Field("", description="Where its settings come from (a paper, a repository and its files).")
    split: OptIds = Field(None, description=(
        "The competition ids evaluated, in table order; null = the run's own tasks (`--tasks`, `--train-tasks` or "
        "its held-out tasks). Each is looked up under the task roots (`wmrl eval --root`)."))
    categories: dict[str, str] = Field(default_factory=dict, description=(
        "Category of each task id (e.g. tabular, text, image), the table's columns; empty = one category 'all'. "
        "With a split, every id of the split needs one."))
    samples_per_task: OptInt = Field(None, ge=1, description=(
        "k: samples (episodes) per task, all counted in avg@k; null = the run's eval.samples_per_task."))
    max_turns: OptInt = Field(None, ge=1, le=16, description=(
        "Turns per episode (multi-turn: each turn sees its execution feedback and revises); null = the run's "
        "episode.max_turns."))
    temperature: OptFloat = Field(None, gt=0.0, description="Sampling temperature; null = the run's eval.temperature.")
    top_p: OptFloat = Field(None, gt=0.0, le=1.0, description="Nucleus sampling p; null = the run's rollout.top_p.")
    max_new_tokens: OptInt = Field(None, ge=1, description=(
        "Completion budget per turn, tokens; null = the run's rollout.max_new_tokens."))
    time_limit_s: OptFloat = Field(None, gt=0.0, description=(
        "Wall-clock limit of one execution, seconds; null = each task's own time_limit_s."))
    episode_score: Literal["final", "best_turn"] = Field("final", description=(
        "A sample's score: its final submission's, or the best over its turns whose submission was graded."))
    failure_score: Float = Field(0.0, ge=0.0, le=1.0, description=(
        "Score of a sample without a graded submission (failed program, no valid submission): counted, never "
        "excluded."))
    score: Literal["reward", "percentile"] = Field("reward", description=(
        "'percentile': every task must be rewarded by its leaderboard percentile (MLE-Dojo position score); "
        "'reward': any reward kind (a DSBench task without a leaderboard is scored by RPG)."))
    overall: Literal["category_mean", "task_mean"] = Field("task_mean", description=(
        "The overall number: the mean of the category means, or the mean of avg@k over tasks."))

    @field_validator("categories", mode="before")
    @classmethod
    def _category_map(cls, v: Any) -> Any:
        if v is None:
            return {}
        if not isinstance(v, Mapping):
            raise ValueError(f"categories: expected a mapping of task id to category, got {v!r}")
        bad = {k: c for k, c in v.items() if not isinstance(k, str) or not isinstance(c, str)}
        if bad:
            raise ValueError(f"categories: task ids and categories must be text, got {bad!r}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> EvalProtocol:
        if not _NAME.match(self.name):
            raise ValueError(f"name: {self.name!r} is not a protocol name; use letters, digits, '_', '.' and '-'")
        if self.split is not None:
            if not self.split:
                raise ValueError("split: an empty list; give the competition ids, or null for the run's own tasks")
            dup = sorted({t for t in self.split if self.split.count(t) > 1})
            if dup:
                raise ValueError(f"split: {', '.join(dup)} given more than once; list each competition once")
            if self.categories:
                extra = [t for t in self.categories if t not in self.split]
                if extra:
                    raise ValueError(f"categories: {', '.join(extra)} not in the split; add them to split or "
                                     "remove them from categories")
                lacking = [t for t in self.split if t not in self.categories]
                if lacking:
                    raise ValueError(f"categories: no category for {', '.join(lacking)}; give every id of the "
                                     "split a category, or none at all")
        bad = [t for t, c in self.categories.items() if not str(c).strip()]
        if bad:
            raise ValueError(f"categories: an empty category for {', '.join(bad)}")
        if self.overall == "category_mean" and not self.categories:
            raise ValueError("overall: 'category_mean' needs categories; give them, or use overall: task_mean")
        return self

    def category_of(self, task_id: str) -> str:
        """The category of ``task_id`` (:data:`ALL` when the protocol names no categories).

        Raises:
            ConfigError: the protocol has categories but none for this task.
        """
        if not self.categories:
            return ALL
        if task_id not in self.categories:
            raise ConfigError(f"protocol {self.name!r} gives no category for task {task_id!r}; add it to "
                              f"categories (known: {', '.join(sorted(set(self.categories.values())))})")
        return self.categories[task_id]

    def category_order(self, task_ids: Sequence[str]) -> list[str]:
        """Categories in table order: as they first appear in the split (else in ``task_ids``)."""
        return list(dict.fromkeys(self.category_of(t) for t in (self.split or task_ids)))


#: The 14 competitions of the MLE-Dojo test split the WMRL paper's table reports, by the table's categories (Tab,
#: Text, Img), as the WMRL paper's public reference implementation lists them (ml_research/eval/leaderboard_mle.py).
PAPER_SPLIT: dict[str, tuple[str, ...]] = {
    "tabular": ("GiveMeSomeCredit", "forest-cover-type-kernels-only", "novozymes-enzyme-stability-prediction",
                "integer-sequence-learning", "afsis-soil-properties"),
    "text": ("quora-question-pairs", "AI4Code", "jigsaw-unintended-bias-in-toxicity-classification",
             "quora-insincere-questions-classification"),
    "image": ("uw-madison-gi-tract-image-segmentation", "invasive-species-monitoring", "kuzushiji-recognition",
              "bengaliai-cv19", "cassava-leaf-disease-classification"),
}

DEFAULT = EvalProtocol(
    name="default", description="`wmrl eval` without a protocol: the run's tasks and eval settings, plain means.",
    source="wmrl")
PAPER = EvalProtocol(
    name="paper",
    description="The MLE-Dojo (test) table of the WMRL paper: avg@8 per task over 14 competitions, per-category means "
                "(Tab, Text, Img) and their mean (Avg).",
    source="the WMRL paper (Scaling Automatic Research Agents via World Models) and its public reference "
           "implementation "
           "(github.com/xiyuanyang45/WMRL): ml_research/eval/eval_checkpoint.py (G=8, K=4, temperature 0.8, "
           "top_p 1.0, 4096 new tokens per turn, 600 s per execution), ml_research/agent/rollout.py and "
           "agent/grader.py (a trajectory scores the best position score over its turns, no valid submission "
           "= 0), ml_research/eval/leaderboard_mle.py (the 14 competitions and their categories, failures as 0)",
    split=[t for ids in PAPER_SPLIT.values() for t in ids],
    categories={t: c for c, ids in PAPER_SPLIT.items() for t in ids},
    samples_per_task=8, max_turns=4, temperature=0.8, top_p=1.0, max_new_tokens=4096, time_limit_s=600.0,
    episode_score="best_turn", failure_score=0.0, score="percentile", overall="category_mean")

#: The protocol registry: name -> :class:`EvalProtocol` (entry-point group ``wmrl.protocols``; an entry point names
#: an :class:`EvalProtocol` object).
PROTOCOLS: Registry[EvalProtocol] = Registry("protocol", group="wmrl.protocols")
for _p in (DEFAULT, PAPER):
    PROTOCOLS.register(_p.name, _p)


def register_protocol(protocol: EvalProtocol, *, replace: bool = False) -> EvalProtocol:
    """Add ``protocol`` to the registry under its name; returns it.

    Raises:
        ValueError: the name is a built-in one (:data:`BUILTIN`), or taken and ``replace`` is False
            (:class:`wmrl.core.registry.DuplicateName`).
    """
    if protocol.name in BUILTIN:
        raise ValueError(f"protocol {protocol.name!r} is built in and cannot be replaced; register yours under "
                         "another name")
    return PROTOCOLS.register(protocol.name, protocol, replace=replace)


def protocol_names() -> list[str]:
    """The registered protocol names, built-in ones first."""
    return [*BUILTIN, *sorted(n for n in PROTOCOLS.names() if n not in BUILTIN)]


def protocol_from_dict(data: Mapping[str, Any], where: str = "protocol") -> EvalProtocol:
    """Build and validate a protocol from a mapping (parsed YAML).

    Raises:
        ConfigError: not a mapping, an unknown key, a wrong type, an out-of-range, disallowed or non-finite
            value, or inconsistent fields; the message starts with ``where``.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: the top level must be a mapping of protocol keys, got {type(data).__name__}")
    if "name" not in data:
        raise ConfigError(f"{where}: name: missing; give the protocol a name (letters, digits, '_', '.', '-')")
    try:
        p = EvalProtocol.model_validate(dict(data))
    except ValidationError as e:
        raise ConfigError(f"{where}: " + _errors_text(e, EvalProtocol).replace("\n", f"\n{where}: ")) from None
    try:
        _require_finite(p)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    return p


def load_protocol(path: str | Path) -> EvalProtocol:
    """Read a protocol from a YAML file of :class:`EvalProtocol`'s keys (``name`` defaults to the file's stem).

    Raises:
        FileNotFoundError: no such file.
        ConfigError: a folder, not YAML, or a bad protocol (:func:`protocol_from_dict`).
    """
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"protocol {str(p)!r} is a folder, not a YAML file")
    if not p.is_file():
        raise FileNotFoundError(f"protocol file {str(p)!r} not found")
    try:
        data = load_yaml(p.read_text())
    except UnicodeDecodeError as e:
        raise ConfigError(f"cannot parse {p} as YAML: not a text file ({e.reason} at byte {e.start})") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"cannot parse {p} as YAML: {_yaml_error_text(e)}") from e
    if isinstance(data, Mapping) and "name" not in data:
        data = {"name": p.stem, **data}
    return protocol_from_dict(data if data is not None else {}, where=str(p))


def get_protocol(protocol: str | Path | EvalProtocol) -> EvalProtocol:
    """A protocol by registered name, or read from a YAML file (a path ending in ``.yaml``/``.yml``, or an
    existing file); an :class:`EvalProtocol` is returned as it is.

    Raises:
        ConfigError: an unknown name (the message lists the registered ones), or a bad file.
        FileNotFoundError: a ``.yaml`` path that does not exist.
    """
    if isinstance(protocol, EvalProtocol):
        return protocol
    text = str(protocol)
    if text in PROTOCOLS:
        return PROTOCOLS.get(text)
    if text.endswith((".yaml", ".yml")) or Path(text).is_file():
        return load_protocol(text)
    close = PROTOCOLS.unknown(text).close
    hint = f" Did you mean {close!r}?" if close else ""
    raise ConfigError(f"unknown protocol {text!r}.{hint} Registered: {', '.join(protocol_names())}; or give the path "
                      "of a YAML file with the protocol's keys (docs/training.md, Evaluation protocols)")


#: The protocol settings ``wmrl eval --override KEY=VALUE`` may change (sampling and budgets; never the split,
#: the scoring or the aggregation).
OVERRIDABLE = ("samples_per_task", "max_turns", "temperature", "top_p", "max_new_tokens", "time_limit_s")


def with_overrides(protocol: EvalProtocol, items: Sequence[str]) -> tuple[EvalProtocol, list[str]]:
    """``protocol`` with some of its sampling settings changed, e.g. to run the ``paper`` protocol at small settings
    on a CPU; a result under changed settings is not comparable with the protocol's (:func:`aggregate`).

    Args:
        protocol: the protocol.
        items: ``KEY=VALUE`` strings, KEY one of :data:`OVERRIDABLE`, VALUE parsed as YAML (``null`` falls back to
            the run's setting).

    Returns:
        ``(protocol, changes)``: the protocol with the new values (same name) and one ``"key old -> new"`` per
        setting whose value changed.

    Raises:
        ConfigError: an item without ``=``, a key that is not overridable, or a value the protocol refuses.
    """
    data: dict[str, Any] = {}
    for item in items:
        key, sep, text = str(item).partition("=")
        key = key.strip()
        if not sep:
            raise ConfigError(f"--override {item!r}: expected KEY=VALUE, e.g. samples_per_task=1")
        if key not in OVERRIDABLE:
            raise ConfigError(f"--override {item!r}: {key!r} cannot be overridden; choose from "
                              f"{', '.join(OVERRIDABLE)} (the split, scoring and aggregation are the protocol "
                              "itself: write a protocol of your own to change them)")
        try:
            data[key] = load_yaml(text) if text.strip() else None
        except yaml.YAMLError as e:
            raise ConfigError(f"--override {item!r}: {_yaml_error_text(e)}") from None
    new = protocol_from_dict({**protocol.model_dump(), **data}, where="--override")
    old = protocol.model_dump()
    changes = [f"{k} {old[k]!r} -> {getattr(new, k)!r}" for k in OVERRIDABLE if k in data and old[k] != getattr(new, k)]
    return new, changes


def sample_score(protocol: EvalProtocol, status: str, reward: float | None,
                 best_valid_reward: float | None) -> tuple[float, str]:
    """One sample's protocol score and its kind.

    Args:
        protocol: gives ``episode_score`` and ``failure_score``.
        status: the final submission's execution status.
        reward: the final submission's reward (None: not graded).
        best_valid_reward: the best reward over the sample's graded turns (None: none was graded).

    Returns:
        ``(score, kind)``: kind ``ok`` (a graded submission's reward), ``failed`` (``failure_score``: no graded
        submission) or ``infra`` (``failure_score``: an infrastructure failure, not the program's doing).
    """
    if status == "infra_error" or reward is None or not math.isfinite(float(reward)):
        return float(protocol.failure_score), "infra"
    if protocol.episode_score == "best_turn":
        if best_valid_reward is not None and math.isfinite(float(best_valid_reward)):
            return float(best_valid_reward), "ok"
        return float(protocol.failure_score), "failed"
    if status == "ok":
        return float(reward), "ok"
    return float(protocol.failure_score), "failed"


def aggregate(protocol: EvalProtocol, outcomes: Mapping[str, Mapping[str, Sequence[Any]]], k: int, *,
              missing: Sequence[str] | Mapping[str, str] = (), changes: Sequence[str] = (),
              unwritable: Mapping[str, str] | None = None) -> dict[str, Any]:
    """avg@k per task, category means and the overall number of one evaluation (module docstring's formulas).

    Args:
        protocol: the protocol (scoring, categories, overall).
        outcomes: ``{task id: {"status": [k], "reward": [k], "best_valid_reward": [k]}}``, the
            ``sample_outcomes`` of an evaluation record (:func:`wmrl.training.evaluation.sample_outcomes`).
        k: samples per task; every task must have exactly k samples.
        missing: competitions of the split that were not evaluated (they make the result not comparable): their
            ids, or ``{id: why}``.
        changes: the protocol's settings changed for this run (:func:`with_overrides`; they make the result not
            comparable).
        unwritable: ``{id: why}``, competitions of the split that were not run because the agent's scaffold cannot
            write their submission: each is scored ``failure_score`` on all k samples (counted as failed), as the
            reference implementation scores a failed submission; they stay in both means.

    Returns:
        ``{"protocol", "k", "per_task": {id: {"category", "avg_at_k", "scores", "n", "n_failed", "n_infra"}},
        "categories": {category: {"mean", "n_tasks", "tasks"}}`` (table order), ``"category_mean"`` (mean of the
        category means), ``"task_mean"`` (mean of avg@k over tasks), ``"overall"`` (one of the two, as
        ``protocol.overall`` says) and ``"overall_kind"``, ``"n_tasks"`` (evaluated), ``"n_split"`` (the split's
        competitions), ``"n_samples"``, ``"n_failed"``,
        ``"n_infra"``, ``"missing"`` (ids), ``"missing_reasons"`` (``{id: why}``, where given), ``"unwritable"``
        (``{id: why}``; their per-task entries also hold ``"not_run"``: why), ``"changes"``,
        ``"comparable"`` (no missing competition, no infrastructure failure, no changed setting) and
        ``"not_comparable"`` (the reasons)}``. Scores are in [0, 1].

    Raises:
        ValueError: no task, or a task whose lists do not hold k samples.
        ConfigError: a task without a category in a protocol that has categories.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    unwritable = dict(unwritable or {})
    if not outcomes and not unwritable:
        raise ValueError("no task to aggregate")
    fail = float(protocol.failure_score)
    outcomes = {**outcomes, **{tid: {"status": ["not_run"] * k, "reward": [fail] * k, "best_valid_reward": [None] * k}
                               for tid in unwritable}}
    per_task: dict[str, dict[str, Any]] = {}
    for tid, o in outcomes.items():
        n = {len(o.get(key, ())) for key in ("status", "reward", "best_valid_reward")}
        if n != {k}:
            raise ValueError(f"task {tid!r}: expected {k} samples in status, reward and best_valid_reward, got "
                             f"{sorted(n)}")
        scored = [sample_score(protocol, s, r, b) for s, r, b in zip(o["status"], o["reward"], o["best_valid_reward"])]
        scores = [s for s, _ in scored]
        per_task[tid] = {"category": protocol.category_of(tid), "avg_at_k": float(sum(scores) / k),
                         "scores": scores, "n": k, "n_failed": sum(kind == "failed" for _, kind in scored),
                         "n_infra": sum(kind == "infra" for _, kind in scored)}
        if tid in unwritable:
            per_task[tid]["not_run"] = unwritable[tid]
    ordered = [t for t in (protocol.split or []) if t in per_task] + sorted(t for t in per_task
                                                                            if t not in (protocol.split or []))
    per_task = {t: per_task[t] for t in ordered}
    cats: dict[str, dict[str, Any]] = {}
    for c in protocol.category_order(ordered):
        tids = [t for t in ordered if per_task[t]["category"] == c]
        if tids:
            cats[c] = {"mean": float(sum(per_task[t]["avg_at_k"] for t in tids) / len(tids)), "n_tasks": len(tids),
                       "tasks": tids}
    category_mean = float(sum(v["mean"] for v in cats.values()) / len(cats))
    task_mean = float(sum(v["avg_at_k"] for v in per_task.values()) / len(per_task))
    n_infra = sum(v["n_infra"] for v in per_task.values())
    why = dict(missing) if isinstance(missing, Mapping) else {}
    missing = list(missing)
    n_split = len(protocol.split) if protocol.split else len(per_task) + len(missing)
    reasons = []
    if missing:
        reasons.append(f"{len(missing)} of the protocol's {n_split} competitions were not evaluated: "
                       f"{', '.join(missing)}")
    if n_infra:
        reasons.append(f"{n_infra} sample(s) hit an infrastructure failure (scored as failures, "
                       f"{protocol.failure_score:g}); rerun them on a healthy executor")
    if changes:
        reasons.append(f"settings changed from the protocol's: {', '.join(changes)}")
    return {
        "protocol": protocol.name, "k": int(k), "per_task": per_task, "categories": cats,
        "category_mean": category_mean, "task_mean": task_mean,
        "overall": category_mean if protocol.overall == "category_mean" else task_mean,
        "overall_kind": protocol.overall, "n_tasks": len(per_task), "n_split": n_split, "n_samples": k * len(per_task),
        "n_failed": sum(v["n_failed"] for v in per_task.values()), "n_infra": n_infra,
        "missing": missing, "missing_reasons": why, "unwritable": unwritable, "changes": list(changes),
        "comparable": not reasons,
        "not_comparable": reasons,
    }
