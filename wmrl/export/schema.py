"""The Arrow schema of an exported dataset (docs/export.md): one row per ``samples.jsonl`` line of a run.

The schema is explicit, so every column has its type even when a run leaves it all null (a ``grpo`` run has no
world-model columns, a single-turn run no turns), and files of different runs concatenate. Its version is
:data:`SCHEMA_VERSION`, stored in every row (``schema_version``) and in the file's metadata
(:data:`METADATA_KEY`). A change that renames, removes or retypes a column raises the version; a new column may
be added without one.
"""
from __future__ import annotations

from typing import Any

#: The version of the exported schema (column ``schema_version`` and the file metadata).
SCHEMA_VERSION = 1
#: The key of the schema's metadata (JSON ``{"schema_version", "source": "run" | "bench", "created_at",
#: "run_ids"}``): ``pyarrow.parquet.read_schema(FILE).metadata[METADATA_KEY]``.
METADATA_KEY = b"wmrl.export"
#: The key of the file footer's metadata, written when the export ends (JSON ``{"rows", "runs": [{"run_id", "rows",
#: "executions_joined", "skipped_lines", "skipped"}]}``): ``pyarrow.parquet.read_metadata(FILE).metadata[...]``.
RUNS_METADATA_KEY = b"wmrl.export.runs"

#: ``(name, Arrow type, meaning)`` of the observation struct (``wmrl.episodes.Observation``; docs/multiturn.md).
OBSERVATION_FIELDS: list[tuple[str, str, str]] = [
    ("turn", "int64", "1-based turn whose program this is the feedback of"),
    ("source", "string", "`execution` (a real run on the validation view) or `world_model` (predicted)"),
    ("status", "string", "`ok` or the execution status; the world model gives `ok` or `runtime_error`"),
    ("validation_score", "float64", "the task's metric on the held-out rows of train.csv, raw units (null: failed)"),
    ("metric", "string", "the metric's name"),
    ("lower_is_better", "bool", "the metric's direction"),
    ("wall_s", "float64", "the program's run time, seconds (the world model: the task's typical run time)"),
    ("error_tail", "string", "the end of the error message (failures; empty for `ok`; cleaned like `error`)"),
    ("validation_fraction", "float64", "held-out share of train.csv"),
]

#: ``(name, Arrow type, meaning)`` of one turn of a multi-turn episode (column ``turns``).
TURN_FIELDS: list[tuple[str, str, str]] = [
    ("turn", "int64", "1-based turn"),
    ("stream", "string", "`anchor` (executed on the validation view) or `wm`"),
    ("executed", "bool", "the turn's program ran in the sandbox"),
    ("status", "string", "execution status (executed turns) or the world model's predicted observation status"),
    ("reward_true", "float64", "the program's real grade (executed turns; null otherwise)"),
    ("reward_wm", "float64", "the world model's raw score of the program (null without a world model)"),
    ("final", "bool", "this turn's program is the episode's submission"),
    ("completion", "string", "the policy's text of this turn (first 2,000 characters)"),
    ("program_sha256", "string", "SHA-256 of the turn's program (null in runs written before it was logged)"),
    ("request_id", "string", "the execution's request id in `executions.sqlite` (executed turns)"),
    ("wall_s", "float64", "execution wall seconds (executed turns)"),
    ("cpu_s", "float64", "execution CPU-seconds of the sandboxed process tree (executed turns)"),
    ("peak_rss_bytes", "int64", "execution peak resident memory, bytes (executed turns)"),
    ("observation", "observation", "what the next turn was shown (struct below)"),
    ("observation_wm", "observation", "executed turns of a run with a world model: what it would have shown"),
    ("prompt", "string", "the prompt this turn was sampled from (the task and the episode's history so far)"),
    ("logprobs", "list<float64>", "the sampling log-probability of each completion token of this turn (0 for a "
                                  "token a grammar forces; null where not logged)"),
]

#: ``(name, Arrow type, meaning)`` of one chat message (column ``messages``).
MESSAGE_FIELDS: list[tuple[str, str, str]] = [
    ("role", "string", "`user` or `assistant`"),
    ("content", "string", "the message's text"),
]

#: ``(name, Arrow type, meaning)`` of every column, in file order. The types are names of
#: :func:`arrow_type`; ``turns`` is a list of the :data:`TURN_FIELDS` struct.
COLUMNS: list[tuple[str, str, str]] = [
    ("schema_version", "int32", "this schema's version (`1`)"),
    ("run_id", "string", "the run directory relative to the exported folder (`wmrl/seed0` in a bench; the "
                         "folder's name for one run)"),
    ("run_name", "string", "the config's `name` (else the folder's name)"),
    ("method", "string", "the recipe trained (`grpo`, `wm`, `wmrl`, an ablation)"),
    ("seed", "int64", "the config's `seed`"),
    ("config_sha256", "string", "SHA-256 of the run's `config.yaml` (null when absent)"),
    ("step", "int64", "training step whose update used the sample (1-based)"),
    ("origin_step", "int64", "`anchor_late` rows: the step the sample was generated and routed at; else = `step`"),
    ("staleness", "int64", "`anchor_late` rows: `step - origin_step`; else 0"),
    ("task_id", "string", "the task"),
    ("group", "int64", "the group (task) index within the step, 0..M-1"),
    ("sample", "int64", "the sample's row in its step's batch, 0..B-1 (the `i` of request id `s{step}-g{group}-i{i}`)"),
    ("stream", "string", "`anchor` (executed now), `anchor_late` (an earlier step's anchor trained on now), "
                         "`recalled` (a world-model sample trained on its program's reward measured earlier), "
                         "`wm` (scored by the world model)"),
    ("executed", "bool", "the sample's (final) program ran in the sandbox for its reward"),
    ("prompt", "string", "the policy's prompt (multi-turn: the task prompt of turn 1; null where not logged)"),
    ("prompt_sha256", "string", "SHA-256 of `prompt` (UTF-8): equal for the samples of a group"),
    ("completion", "string", "the policy's completion (the execution log's full text for executed samples, else "
                             "samples.jsonl's first 2,000 characters; multi-turn: the final submission's)"),
    ("completion_truncated", "bool", "`completion` is cut at 2,000 characters"),
    ("completion_tokens", "int64", "completion length, tokens (multi-turn: all turns)"),
    ("program", "string", "the program that ran (executed samples, from the execution log; null otherwise)"),
    ("program_sha256", "string", "SHA-256 of the program (UTF-8)"),
    ("request_id", "string", "the execution's request id in `executions.sqlite` (executed samples)"),
    ("reward_true", "float64", "the true reward, a leaderboard percentile in [0, 1] (executed samples; null "
                               "otherwise and on infrastructure failures)"),
    ("reward_wm", "float64", "the world model's raw prediction r_hat (null without a world model)"),
    ("reward_wm_calibrated", "float64", "the debiased prediction f_hat(r_hat)"),
    ("reward_used", "float64", "the reward the advantage was computed from"),
    ("advantage", "float64", "group-relative advantage"),
    ("weight", "float64", "per-sample loss weight (0: not in the update)"),
    ("dropped", "bool", "left out of the update and the calibration (infrastructure failure)"),
    ("status", "string", "execution status (`ok`, `runtime_error`, `timeout`, `invalid_submission`, "
                         "`memory_exceeded`, `infra_error`; null when not executed)"),
    ("status_wm", "string", "single-turn runs: the world model's most probable outcome class (`syntax_error`, "
                            "`runtime_error`, `no_submission`, `valid`); null without one"),
    ("failure_prob_wm", "float64", "the world model's P(the program fails), in [0, 1]"),
    ("reward_wm_std", "float64", "the world model's predictive standard deviation of the reward"),
    ("error", "string", "the execution's error message (last 500 characters; escape sequences removed, "
                        "control characters shown escaped: `\\x1b`)"),
    ("score", "float64", "the task metric on the test answers, raw units (executed samples)"),
    ("wall_s", "float64", "execution wall seconds (multi-turn: summed over the episode's executed turns)"),
    ("cpu_s", "float64", "execution CPU-seconds of the sandboxed process tree (multi-turn: summed)"),
    ("peak_rss_bytes", "int64", "execution peak resident memory, bytes (multi-turn: the maximum over turns)"),
    ("n_turns", "int32", "multi-turn runs: turns sampled (a submit action counts); null for one turn"),
    ("final_turn", "int32", "multi-turn runs: the 1-based turn whose program is the submission"),
    ("submitted", "bool", "multi-turn runs: the episode ended by the submit action before the last turn"),
    ("turns", "list<turn>", "multi-turn runs: one struct per turn with a program (below); null for one turn"),
    ("messages", "list<message>", "the sample in the chat format of TRL and HF datasets: the `user` prompt and the "
                                  "`assistant` completion (multi-turn: the final turn's prompt, which holds the "
                                  "history, and its completion); null without a prompt"),
    ("logprobs", "list<float64>", "the sampling log-probability of each completion token (0 for a token a grammar "
                                  "forces; multi-turn: the final turn's); null where not logged"),
]


def arrow_type(name: str) -> Any:
    """The :mod:`pyarrow` type of a type name of :data:`COLUMNS` (``int32``, ``int64``, ``float64``, ``bool``,
    ``string``, ``observation``, ``turn``, ``list<turn>``, ``list<message>``, ``list<float64>``).

    Raises:
        KeyError: an unknown type name.
    """
    import pyarrow as pa  # noqa: PLC0415 - heavy/optional dependency

    def struct(fields: list[tuple[str, str, str]]) -> Any:
        return pa.struct([pa.field(n, arrow_type(t)) for n, t, _ in fields])

    simple = {"int32": pa.int32(), "int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_(),
              "string": pa.string()}
    if name in simple:
        return simple[name]
    if name == "observation":
        return struct(OBSERVATION_FIELDS)
    if name == "turn":
        return struct(TURN_FIELDS)
    if name == "list<turn>":
        return pa.list_(struct(TURN_FIELDS))
    if name == "list<message>":
        return pa.list_(struct(MESSAGE_FIELDS))
    if name == "list<float64>":
        return pa.list_(pa.float64())
    raise KeyError(f"unknown column type {name!r}")


def arrow_schema(metadata: dict[bytes, bytes] | None = None) -> Any:
    """The ``pyarrow.Schema`` of an exported dataset (:data:`COLUMNS`, every field nullable), with ``metadata``."""
    import pyarrow as pa  # noqa: PLC0415 - heavy/optional dependency

    return pa.schema([pa.field(n, arrow_type(t)) for n, t, _ in COLUMNS], metadata=metadata)


def column_names() -> list[str]:
    """The column names, in file order."""
    return [n for n, _, _ in COLUMNS]


def schema_markdown() -> str:
    """The schema as the four Markdown tables of docs/export.md (columns, a turn, an observation, a message)."""
    parts = []
    for title, fields in (("Columns", COLUMNS), ("`turns`: one struct per turn", TURN_FIELDS),
                          ("`observation`, `observation_wm`", OBSERVATION_FIELDS),
                          ("`messages`: one struct per message", MESSAGE_FIELDS)):
        parts.append(f"#### {title}\n\n| column | type | meaning |\n|---|---|---|\n"
                     + "".join(f"| `{n}` | {t} | {d} |\n" for n, t, d in fields))
    return "\n".join(parts)
