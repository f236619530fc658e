"""What the trainer makes of multi-turn episodes (``episode.max_turns`` K > 1; docs/multiturn.md).

The episodes themselves are the environment's (:class:`wmrl.step.multiturn.MultiTurnKaggleEnvironment`: turns
2..K, their feedback, the final submissions the step batch holds). The recipe runs on episodes unchanged (an
episode's reward: its final submission; its groups: turn 1's); the calibrator and the window also learn every earlier
anchor turn's pair (r_hat, r) after the step (:func:`earlier_anchor_pairs`, learned with
:meth:`wmrl.core.recipe.Recipe.learn_late` at the same step). The update trains every turn's tokens with its
episode's advantage (:func:`update_parts`); the metrics and the samples report the turns (:func:`episode_metrics`,
:func:`add_turns`).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from wmrl.core.episodes import best_turn, finite_mean, reward_after_turn, turn_row_weights
from wmrl.episodes.fidelity import feedback_fidelity
from wmrl.episodes.rollout import Episodes
from wmrl.execution.types import program_hash
from wmrl.step.batch import StepBatch


def add_turns(sb: StepBatch, lines: list[dict[str, Any]]) -> None:
    """Complete the step's ``samples.jsonl`` lines (one per episode): the final submission's completion, the
    turns, whether the episode submitted early, and every turn (:func:`turn_records`)."""
    ep, fb = sb.episodes, sb.feedback
    assert ep is not None and fb is not None, "add_turns is for the steps of multi-turn episodes"
    turns = turn_records(sb, ep, fb.observations_wm)
    for i, line in enumerate(lines[:ep.B]):
        line.update(completion=ep.completion(i, int(ep.final_turn[i]))[:2000], n_turns=int(ep.n_turns[i]),
                    program_sha256=program_hash(ep.program(i, int(ep.final_turn[i]))),
                    final_turn=int(ep.final_turn[i]), submitted=bool(ep.submitted[i]),
                    turns=[{k: v for k, v in t.items() if k != "episode"} for t in turns if t["episode"] == i])


def earlier_anchor_pairs(sb: StepBatch, ep: Episodes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (group ids, r, r_hat) of every valid anchor turn that is not its episode's final submission: the
    calibration pairs of the turns before the last ([N] arrays)."""
    g, rt, rw = [], [], []
    for e in range(ep.B):
        if not (sb.is_anchor[e] and ep.valid[e]):
            continue
        for j, fb in enumerate(ep.feedback[e]):
            if fb is None or j + 1 == ep.final_turn[e]:
                continue
            if fb.executed and math.isfinite(fb.reward_true) and math.isfinite(fb.reward_wm):
                g.append(int(sb.gid[e]))
                rt.append(fb.reward_true)
                rw.append(fb.reward_wm)
    return np.asarray(g, dtype=np.int64), np.asarray(rt, dtype=np.float64), np.asarray(rw, dtype=np.float64)


def update_parts(ep: Episodes, adv: np.ndarray, weights: np.ndarray, valid: np.ndarray, aggregation: str
                 ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, list[tuple[Any, np.ndarray, np.ndarray]]]:
    """The update's rows: ``(turn-1 batch, adv [R_1], weights [R_1], valid [R_1], extra parts)``, where each later
    turn is an extra part of its valid rows; every row has its episode's advantage and the row weight of
    :func:`wmrl.core.episodes.turn_row_weights` (so the loss is the episodes' loss with observations masked)."""
    rows = np.concatenate(ep.rows)
    tokens = np.concatenate([b.loss_mask.sum(dim=1).cpu().numpy() for b in ep.turns])
    w_rows = turn_row_weights(weights, rows, tokens, aggregation, row_valid=valid[rows])
    parts, start = [], 0
    for b, r in zip(ep.turns, ep.rows):
        sl = slice(start, start + r.size)
        parts.append((b, adv[r], w_rows[sl], valid[r]))
        start += r.size
    first, extra = parts[0], []
    for b, a, w, v in parts[1:]:
        keep = np.flatnonzero(v)
        if keep.size:
            extra.append((b.slice(keep.tolist()), a[keep], w[keep]))
    return first[0], first[1], first[2], first[3], extra


def episode_metrics(sb: StepBatch, ep: Episodes, observations_wm: dict[tuple[int, int], Any]) -> dict[str, Any]:
    """The step's multi-turn keys of ``metrics.jsonl`` (docs/run-directory.md): turns and submissions, the anchor
    episodes' grade after each turn (``reward_true_turn<j>_mean``, carried forward after a submission), the best
    of their turns, the world model's score after each turn, and the feedback's fidelity on this step's anchors."""

    K = ep.max_turns
    a_ok = sb.is_anchor & ep.valid
    after_true = reward_after_turn(ep.turn_array("reward_true"), ep.final_turn)
    after_wm = reward_after_turn(ep.turn_array("reward_wm"), ep.final_turn)
    rec: dict[str, Any] = {"episode_turns_mean": float(ep.n_turns.mean()) if ep.B else None,
                           "episode_submitted_rate": float(ep.submitted.mean()) if ep.B else None}
    for j in range(K):
        rec[f"reward_true_turn{j + 1}_mean"] = finite_mean(after_true[a_ok, j])
        rec[f"reward_wm_turn{j + 1}_mean"] = finite_mean(after_wm[ep.valid, j])
    rec["reward_true_best_turn_mean"] = finite_mean(best_turn(after_true)[a_ok])
    rec["reward_true_turn_gain"] = (None if rec[f"reward_true_turn{K}_mean"] is None else
                                    rec[f"reward_true_turn{K}_mean"] - rec["reward_true_turn1_mean"])
    fid = feedback_fidelity(turn_records(sb, ep, observations_wm))
    rec.update({f"feedback_{k}": v for k, v in fid.items() if k != "n_pairs_pairwise"})
    return rec


def turn_records(sb: StepBatch, ep: Episodes, observations_wm: dict[tuple[int, int], Any]) -> list[dict[str, Any]]:
    """One record per (episode, turn) with a program: its stream, the real and the world model's observations
    (dicts), the rewards. These are ``samples.jsonl``'s ``turns`` and the input of the fidelity."""
    out = []
    for e in range(ep.B):
        for j, fb in enumerate(ep.feedback[e]):
            if fb is None:
                continue
            wm = observations_wm.get((e, j + 1))
            out.append({"episode": e, "turn": j + 1, "stream": "anchor" if sb.is_anchor[e] else "wm",
                        "executed": fb.executed, "status": fb.status, "reward_true": fb.reward_true,
                        "reward_wm": fb.reward_wm, "final": j + 1 == int(ep.final_turn[e]),
                        "completion": ep.completion(e, j + 1)[:2000],
                        "program_sha256": program_hash(ep.program(e, j + 1)),
                        "observation": None if fb.observation is None else fb.observation.to_dict(),
                        "observation_wm": None if wm is None or not fb.executed else wm.to_dict(),
                        "prompt": ep.prompt(e, j + 1), "logprobs": ep.logprobs(e, j + 1)})
    return out
