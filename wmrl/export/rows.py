"""The rows of one run: ``samples.jsonl`` records, joined with the execution log, as rows of the exported schema
(:data:`wmrl.export.schema.COLUMNS`), and the value helpers that make every field writable (docs/export.md)."""
from __future__ import annotations

import math
import re
from typing import Any

from wmrl.export.schema import SCHEMA_VERSION
from wmrl.program_text import clean, text_sha256

#: The characters of a completion ``samples.jsonl`` holds (a longer one is cut there; the execution log has it whole).
COMPLETION_CAP = 2000


def _num(v: Any) -> float | None:
    """A float, or None for null / NaN / infinity / a non-number."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


#: The integers a Parquet int64 column holds.
INT64_RANGE = (-(2**63), 2**63 - 1)


def _int(v: Any) -> int | None:
    """An integer field: None for null or a non-number.

    Raises:
        ValueError: an integer beyond 64 bits (the record cannot be written; it is skipped).
    """
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
        return None
    out = int(v)
    if not INT64_RANGE[0] <= out <= INT64_RANGE[1]:
        raise ValueError(f"an integer beyond 64 bits ({str(out)[:12]}..., {len(str(out))} digits)")
    return out


def key_field(v: Any, name: str) -> int:
    """An execution's key field as an integer.

    Raises:
        ValueError: not an integer of at most 64 bits (the message names the field and shows the value).
    """
    if isinstance(v, bool) or not isinstance(v, int) or not INT64_RANGE[0] <= v <= INT64_RANGE[1]:
        raise ValueError(f"{name} {str(v)[:40]!r} is not an integer of at most 64 bits")
    return v


_SURROGATE = re.compile("[\ud800-\udfff]")


def text_field(v: Any) -> str | None:
    """Text (a non-text value as its ``str``), lone surrogates (not valid Unicode, not writable) as U+FFFD."""
    if v is None:
        return None
    text = v if isinstance(v, str) else str(v)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


#: The most characters of a program's error text (``error``, ``error_tail``) an exported row holds (the tail).
ERROR_CHARS = 2000


def _program_text(v: Any) -> str | None:
    """Text the program controls (an error message, an error tail), cleaned and capped: no escape sequence,
    control character or lone surrogate reaches the dataset (:func:`wmrl.program_text.clean`)."""
    return None if v is None else clean(v, ERROR_CHARS)


def _floats(v: Any) -> list[float | None] | None:
    """A list of numbers (a non-finite or non-number entry as null), or None for anything but a list."""
    return [_num(x) for x in v] if isinstance(v, list) else None


def _bool(v: Any) -> bool | None:
    return None if v is None else bool(v)


def _observation(d: Any) -> dict[str, Any] | None:
    if not isinstance(d, dict):
        return None
    return {"turn": _int(d.get("turn")), "source": text_field(d.get("source")), "status": text_field(d.get("status")),
            "validation_score": _num(d.get("validation_score")), "metric": text_field(d.get("metric")),
            "lower_is_better": _bool(d.get("lower_is_better")), "wall_s": _num(d.get("wall_s")),
            "error_tail": _program_text(d.get("error_tail")), "validation_fraction": _num(d.get("validation_fraction"))}


def _costs(rec: dict[str, Any] | None) -> dict[str, Any]:
    if rec is None:
        return {"request_id": None, "wall_s": None, "cpu_s": None, "peak_rss_bytes": None}
    return {"request_id": rec.get("request_id"), "wall_s": _num(rec.get("wall_s")), "cpu_s": _num(rec.get("cpu_s")),
            "peak_rss_bytes": _int(rec.get("peak_rss_bytes"))}


class RunRows:
    """Turns the records of one run into rows of the schema (:data:`wmrl.export.schema.COLUMNS`).

    Args:
        source: the run (:class:`wmrl.export.dataset.RunSource`: ``run_id``, ``path``).
        info: the run's ``run_name``, ``method``, ``seed``, ``config_sha256``.
        executions: its execution log (:class:`wmrl.export.dataset.Executions`).
    """

    def __init__(self, source: Any, info: dict[str, Any], executions: Any) -> None:
        self.source, self.info, self.ex = source, info, executions
        self.joined = 0
        self._position: dict[int, int] = {}  # step -> own (not late) lines seen: the sample of an older run's line
        self._prompts: dict[str, str] = {}  # prompt_sha256 -> text, of the lines read so far

    def row(self, rec: dict[str, Any]) -> dict[str, Any]:
        step = _int(rec.get("step"))
        if step is None:
            raise ValueError("no integer 'step'")
        group = _int(rec.get("group"))
        late = rec.get("stream") == "anchor_late"
        origin = _int(rec.get("origin_step")) if late else step
        if origin is None:
            raise ValueError("an anchor_late line without 'origin_step'")
        sample = _int(rec.get("sample"))
        if sample is None and not late:  # written before `sample` was logged: the line's place in its step
            sample = self._position.get(step, 0)
        if not late:
            self._position[step] = self._position.get(step, 0) + 1
        stream = text_field(rec.get("stream"))
        if stream is None:
            raise ValueError("no 'stream'")
        executed = stream in ("anchor", "anchor_late")
        if stream == "wm" and rec.get("recalled"):
            stream = "recalled"
        turns_in = rec.get("turns")
        multi = isinstance(turns_in, list)
        turn_recs: list[dict[str, Any]] = [t for t in turns_in or [] if isinstance(t, dict)] if multi else []
        completion = text_field(rec.get("completion"))
        final = _int(rec.get("final_turn")) if multi else None
        turns, ex_final = None, None
        if multi:
            turns = [self._turn(origin, group, sample, t) for t in turn_recs]
            ex_final = next((t["_ex"] for t in turns if t.get("final") and t["_ex"] is not None), None)
            for t in turns:
                t.pop("_ex")
        elif executed and group is not None:
            ex_final = self.ex.find(origin, group, sample, None, completion, text_field(rec.get("program_sha256")))
            self.joined += ex_final is not None
        full = ex_final.get("completion") if ex_final else None
        if not multi and full and completion is not None and not full.startswith(completion[:COMPLETION_CAP]):
            full = None  # not the same text: keep the line's own
        row = {
            "schema_version": SCHEMA_VERSION, "run_id": self.source.run_id, **self.info,
            "step": step, "origin_step": origin, "staleness": _int(rec.get("staleness")) or 0,
            "task_id": text_field(rec.get("task_id")), "group": group, "sample": sample, "stream": stream,
            "executed": executed,
            "prompt": self._prompt(rec, ex_final), "prompt_sha256": text_field(rec.get("prompt_sha256")),
            "completion": full if full is not None else completion,
            "completion_truncated": full is None and completion is not None and len(completion) >= COMPLETION_CAP,
            "completion_tokens": _int(rec.get("completion_tokens")),
            "program": self.ex.program(ex_final) if ex_final else None,
            "program_sha256": text_field(rec.get("program_sha256")) or (ex_final or {}).get("program_sha256"),
            "reward_true": _num(rec.get("reward_true")), "reward_wm": _num(rec.get("reward_wm")),
            "reward_wm_calibrated": _num(rec.get("reward_wm_calibrated")), "reward_used": _num(rec.get("reward_used")),
            "advantage": _num(rec.get("advantage")), "weight": _num(rec.get("weight")),
            "dropped": _bool(rec.get("dropped")), "status": text_field(rec.get("status")),
            "status_wm": text_field(rec.get("status_wm")), "failure_prob_wm": _num(rec.get("failure_prob_wm")),
            "reward_wm_std": _num(rec.get("reward_wm_std")), "error": _program_text(rec.get("error")),
            "score": _num(ex_final.get("score")) if ex_final else None,
            **{k: v for k, v in _costs(ex_final).items() if k != "request_id"},
            "request_id": (ex_final or {}).get("request_id"),
            "n_turns": _int(rec.get("n_turns")) if multi else None, "final_turn": final,
            "submitted": _bool(rec.get("submitted")) if multi else None, "turns": turns,
        }
        final_t = next((t for t in turns or [] if t.get("final")), None)
        row["logprobs"] = _floats(final_t["logprobs"] if final_t else rec.get("logprobs"))
        asked = final_t["prompt"] if final_t and final_t.get("prompt") is not None else row["prompt"]
        said = final_t["completion"] if final_t and not row["completion"] else row["completion"]
        row["messages"] = None if asked is None else [{"role": "user", "content": asked},
                                                      {"role": "assistant", "content": said or ""}]
        if row["prompt_sha256"] is None and row["prompt"] is not None:
            row["prompt_sha256"] = text_sha256(row["prompt"])
        if multi and turns:  # the episode's cost: every executed turn
            done = [t for t in turns if t["request_id"] is not None]
            row["wall_s"] = sum(t["wall_s"] or 0.0 for t in done) if done else None
            row["cpu_s"] = sum(t["cpu_s"] or 0.0 for t in done) if done else None
            row["peak_rss_bytes"] = max((t["peak_rss_bytes"] or 0 for t in done), default=None) if done else None
        return row

    def _prompt(self, rec: dict[str, Any], ex: dict[str, Any] | None) -> str | None:
        """The line's prompt: its own text, else the text of the earlier line with the same ``prompt_sha256`` (the
        trainer writes a group's prompt on its first line only), else the execution log's."""
        text, digest = text_field(rec.get("prompt")), text_field(rec.get("prompt_sha256"))
        if text is not None:
            if digest:
                self._prompts[digest] = text
            return text
        if digest and digest in self._prompts:
            return self._prompts[digest]
        return text_field(ex.get("prompt")) if ex else None

    def _turn(self, step: int, group: int | None, sample: int | None, t: dict[str, Any]) -> dict[str, Any]:
        turn = _int(t.get("turn"))
        rec = None
        if t.get("executed") and group is not None and sample is not None and turn is not None:
            rec = self.ex.find(step, group, sample, turn, None, text_field(t.get("program_sha256")))
            self.joined += rec is not None
        return {"turn": turn, "stream": text_field(t.get("stream")), "executed": _bool(t.get("executed")),
                "status": text_field(t.get("status")), "reward_true": _num(t.get("reward_true")),
                "reward_wm": _num(t.get("reward_wm")), "final": _bool(t.get("final")),
                "completion": text_field(t.get("completion")),
                "program_sha256": text_field(t.get("program_sha256")) or (rec or {}).get("program_sha256"),
                **_costs(rec), "observation": _observation(t.get("observation")),
                "observation_wm": _observation(t.get("observation_wm")),
                "prompt": text_field(t.get("prompt")), "logprobs": _floats(t.get("logprobs")), "_ex": rec}
