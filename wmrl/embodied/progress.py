"""The embodied world model: a learned progress predictor over states, collapsed to one score per episode.

Predictor. p(s, instruction) in [0, 1] = sigmoid(MLP(concat(s_norm, e))), with its own instruction
embedding (it shares no weight with the policy: a world model that shares weights the policy trains is
exploited, docs/models.md). It is fitted by binary cross-entropy on soft labels:

- every state s_t of a successful episode of length L (expert demonstrations and warm-up roll-outs of the
  SFT policy) is labelled t / L (time-based progress, 1 at the success state);
- every state of a failed warm-up roll-out is labelled 0 (it is not on a path to success).

So it is learned from demonstrations and roll-outs, and it is biased in the ways a real progress
predictor is: a failed episode that came close scores high, a slow success scores like a fast one.

Collapse to one scalar per episode (``score_episodes``), over the visited states s_0..s_L:

- ``shaping`` (default): potential-based shaping with potential p (Ng, Harada & Russell 1999): the sum
  of gamma=1 shaping rewards p(s_{t+1}) - p(s_t) telescopes to p(s_L) - p(s_0); averaging the last k and
  the first k states makes it robust to one noisy frame: Delta = mean(p[L-k+1..L]) - mean(p[0..k-1]).
  Delta in [-1, 1] is mapped affinely onto the calibrator's reward bounds: r_hat = (1 + Delta) / 2 in
  [0, 1] (GRPO's standardised advantages are invariant to that map).
- ``peak``: max_t p(s_t). It rewards touching a good state once, even if the episode then falls apart
  (the puck passes the goal and slides off; the gripper reaches the handle and lets go).
- ``final``: p(s_L). It ignores the path, and one misjudged last frame decides the episode.

Why the choice matters: the anchor (the simulator's success) is about the end of the episode, so a
collapse that rewards the path's best moment (peak) has a systematic bias that only the anchors can
expose (docs/embodied.md); shaping measures net progress made, which is what success rewards.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from wmrl.embodied.env import OBS_DIM
from wmrl.embodied.policy import InstructionVocab

Collapse = Literal["shaping", "peak", "final"]


class ProgressPredictor(nn.Module):
    """p(s, instruction) in [0, 1]; instructions are indices into ``instructions``."""

    obs_mean: torch.Tensor  # buffers (register_buffer), typed for the type checker
    obs_std: torch.Tensor
    instr_ids: torch.Tensor
    instr_offsets: torch.Tensor

    def __init__(self, instructions: Sequence[str], hidden: int = 128, lang_dim: int = 16, obs_dim: int = OBS_DIM):
        super().__init__()
        self.instructions = list(instructions)
        self.hidden, self.lang_dim, self.obs_dim = int(hidden), int(lang_dim), int(obs_dim)
        self.vocab = InstructionVocab(self.instructions)
        self.embed = nn.EmbeddingBag(len(self.vocab), lang_dim, mode="mean")
        self.mlp = nn.Sequential(nn.Linear(obs_dim + lang_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                                 nn.ReLU(), nn.Linear(hidden, 1))
        self.register_buffer("obs_mean", torch.zeros(obs_dim))
        self.register_buffer("obs_std", torch.ones(obs_dim))
        ids, offs = self.vocab.encode(self.instructions)
        self.register_buffer("instr_ids", ids, persistent=False)
        self.register_buffer("instr_offsets", offs, persistent=False)

    def logits(self, obs: torch.Tensor, instr: torch.Tensor) -> torch.Tensor:
        """obs [n, 39] float32, instr [n] int64 -> [n] logits."""
        o = ((obs - self.obs_mean) / self.obs_std).clamp(-10, 10)
        e = self.embed(self.instr_ids, self.instr_offsets)[instr]
        return self.mlp(torch.cat([o, e], -1)).squeeze(-1)

    @torch.no_grad()
    def score_states(self, obs: np.ndarray, instr: np.ndarray) -> np.ndarray:
        """Progress of each state: obs [n, 39], instr [n] -> [n] float64 in [0, 1]."""
        if obs.shape[0] == 0:
            return np.zeros(0)
        return torch.sigmoid(self.logits(torch.as_tensor(obs, dtype=torch.float32),
                                         torch.as_tensor(instr, dtype=torch.int64))).double().numpy()

    def save(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        torch.save({"state_dict": self.state_dict(), "instructions": self.instructions, "hidden": self.hidden,
                    "lang_dim": self.lang_dim, "obs_dim": self.obs_dim}, path / "progress.pt")

    @classmethod
    def load(cls, path: Path) -> ProgressPredictor:
        d = torch.load(Path(path) / "progress.pt", weights_only=False)
        m = cls(d["instructions"], d["hidden"], d["lang_dim"], d.get("obs_dim", OBS_DIM))
        m.load_state_dict(d["state_dict"])
        return m


def progress_labels(n_states: int, success: bool) -> np.ndarray:
    """Labels of the states s_0..s_L of one episode (L = n_states - 1): t / L if it succeeded, else 0."""
    if n_states < 1:
        raise ValueError("an episode has at least its initial state")
    if not success:
        return np.zeros(n_states)
    L = max(n_states - 1, 1)
    return np.arange(n_states, dtype=np.float64) / L


def fit_progress(model: ProgressPredictor, episodes: list[tuple[np.ndarray, int, bool]], *, epochs: int, lr: float,
                 batch_size: int, seed: int) -> dict[str, Any]:
    """Fit the predictor on episodes ``(visited obs [L+1, 39], instruction index, success)`` by BCE on
    :func:`progress_labels`. Returns {"wm_loss_first", "wm_loss_last", "n_states", "n_episodes",
    "n_success_episodes"}."""
    if not episodes:
        raise ValueError("no episodes to fit the progress predictor on")
    obs = np.concatenate([e[0] for e in episodes]).astype(np.float32)
    ins = np.concatenate([np.full(e[0].shape[0], e[1], np.int64) for e in episodes])
    y = np.concatenate([progress_labels(e[0].shape[0], e[2]) for e in episodes]).astype(np.float32)
    o, i, t = torch.as_tensor(obs), torch.as_tensor(ins), torch.as_tensor(y)
    model.obs_mean.copy_(o.mean(0))
    model.obs_std.copy_(o.std(0).clamp(min=1e-3))
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    bce = nn.BCEWithLogitsLoss()
    losses = []
    for _ in range(epochs):
        perm = torch.randperm(o.shape[0], generator=g)
        tot = 0.0
        for s in range(0, o.shape[0], batch_size):
            b = perm[s:s + batch_size]
            loss = bce(model.logits(o[b], i[b]), t[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += float(loss.detach()) * b.numel()
        losses.append(tot / o.shape[0])
    return {"wm_loss_first": losses[0] if losses else None, "wm_loss_last": losses[-1] if losses else None,
            "n_states": int(o.shape[0]), "n_episodes": len(episodes),
            "n_success_episodes": int(sum(bool(e[2]) for e in episodes))}


def collapse(progress: np.ndarray, mode: Collapse = "shaping", k: int = 5) -> float:
    """One episode's score from its per-state progress p [L+1] (module docstring), in [0, 1].

    Raises:
        ValueError: empty progress, unknown mode, k < 1.
    """
    p = np.asarray(progress, dtype=np.float64)
    if p.ndim != 1 or p.size == 0:
        raise ValueError(f"progress must be a non-empty 1-D array, got shape {p.shape}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if mode == "shaping":
        kk = min(k, p.size)
        return float(0.5 * (1.0 + p[-kk:].mean() - p[:kk].mean()))
    if mode == "peak":
        return float(p.max())
    if mode == "final":
        return float(p[-1])
    raise ValueError(f"unknown collapse {mode!r}; use shaping, peak or final")


@dataclass
class EpisodeScores:
    """r_hat [B] float64 in [0, 1] (one per episode) and n_states_scored (every visited state of every episode)."""

    r_hat: np.ndarray
    n_states_scored: int


def score_episodes(model: ProgressPredictor, visited: list[np.ndarray], instr: np.ndarray, mode: Collapse = "shaping",
                   k: int = 5) -> EpisodeScores:
    """Score every visited state of every episode in one batched forward pass, then collapse per episode.

    Args:
        visited: B arrays [L_i+1, 39]; instr: [B] int64 instruction indices of the predictor.
    """
    if len(visited) != len(instr):
        raise ValueError(f"{len(visited)} episodes but {len(instr)} instruction indices")
    if not visited:
        return EpisodeScores(np.zeros(0), 0)
    lens = [v.shape[0] for v in visited]
    p = model.score_states(np.concatenate(visited).astype(np.float32),
                           np.concatenate([np.full(n, j, np.int64) for n, j in zip(lens, instr)]))
    out, s = [], 0
    for n in lens:
        out.append(collapse(p[s:s + n], mode, k))
        s += n
    return EpisodeScores(np.asarray(out, np.float64), int(p.size))
