"""A small language-and-state-conditioned Gaussian action policy, and its behaviour cloning (SFT).

Policy. The instruction is tokenised into lower-case words; a word's id comes from a vocabulary built
from every instruction of the suite (unknown words map to id 0), and ``nn.EmbeddingBag(mode="mean")``
averages the word embeddings into e [d_lang]. The state s [39] is standardised with the demonstration
mean and std (buffers). An MLP on concat(s_norm, e) gives the mean mu [4]; a state-independent learned
log standard deviation log_sigma [4] gives the spread:

    pi(a | s, instruction) = N(a; mu(s, e), diag(sigma^2)),
    log pi(a | s, e) = sum_j [ -(a_j - mu_j)^2 / (2 sigma_j^2) - log sigma_j - 0.5 log(2 pi) ]     (exact)

The environment executes clip(a, -1, 1); the log-probability is that of the sampled, unclipped a
(the clip is part of the environment), so GRPO's likelihood ratios are exact.

Behaviour cloning. Demonstrations are Meta-World's scripted experts run with Gaussian noise on the
executed action (:func:`wmrl.embodied.env.expert_rollout`); the mean is fitted to the clean expert action
by mean-squared error (Adam). After cloning, log_sigma is set to ``log(init_std)``: the exploration
noise of the SFT policy that every RL run starts from.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from wmrl.embodied.env import ACT_DIM, OBS_DIM


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


class InstructionVocab:
    """Word ids of the instructions (id 0 = unknown word). ``encode`` -> (flat ids [N] int64, offsets [n])."""

    def __init__(self, instructions: Sequence[str]):
        self.words = ["<unk>"] + sorted({w for s in instructions for w in words(s)})
        self.ids = {w: i for i, w in enumerate(self.words)}

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, instructions: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        flat: list[int] = []
        offsets: list[int] = []
        for s in instructions:
            offsets.append(len(flat))
            toks = [self.ids.get(w, 0) for w in words(s)] or [0]
            flat.extend(toks)
        return torch.tensor(flat, dtype=torch.int64), torch.tensor(offsets, dtype=torch.int64)


@dataclass
class PolicyConfig:
    """Sizes of :class:`GaussianPolicy` (obs_dim / act_dim: 39 / 4 for Meta-World, set by the LIBERO adapter)."""

    hidden: int = 128
    layers: int = 2
    lang_dim: int = 16
    init_std: float = 0.3
    obs_dim: int = OBS_DIM
    act_dim: int = ACT_DIM


class GaussianPolicy(nn.Module):
    """pi(a | s, instruction) (module docstring). Instructions are given as indices into ``instructions``.

    Args:
        instructions: every instruction the policy may be asked (train and held-out tasks), fixed order.
        cfg: sizes.
    """

    obs_mean: torch.Tensor  # buffers (register_buffer), typed for the type checker
    obs_std: torch.Tensor
    instr_ids: torch.Tensor
    instr_offsets: torch.Tensor

    def __init__(self, instructions: Sequence[str], cfg: PolicyConfig):
        super().__init__()
        if cfg.hidden < 1 or cfg.layers < 1 or cfg.lang_dim < 1 or not cfg.init_std > 0:
            raise ValueError(f"bad policy config {cfg}: hidden, layers, lang_dim >= 1 and init_std > 0")
        self.instructions = list(instructions)
        self.cfg = cfg
        self.vocab = InstructionVocab(self.instructions)
        self.embed = nn.EmbeddingBag(len(self.vocab), cfg.lang_dim, mode="mean")
        dims = [cfg.obs_dim + cfg.lang_dim] + [cfg.hidden] * cfg.layers
        mods: list[nn.Module] = []
        for a, b in zip(dims[:-1], dims[1:]):
            mods += [nn.Linear(a, b), nn.Tanh()]
        mods.append(nn.Linear(dims[-1], cfg.act_dim))
        self.mlp = nn.Sequential(*mods)
        self.log_std = nn.Parameter(torch.full((cfg.act_dim,), math.log(cfg.init_std)))
        self.register_buffer("obs_mean", torch.zeros(cfg.obs_dim))
        self.register_buffer("obs_std", torch.ones(cfg.obs_dim))
        ids, offs = self.vocab.encode(self.instructions)
        self.register_buffer("instr_ids", ids, persistent=False)
        self.register_buffer("instr_offsets", offs, persistent=False)

    def index(self, instruction: str) -> int:
        try:
            return self.instructions.index(instruction)
        except ValueError:
            raise ValueError(f"instruction {instruction!r} is not one the policy was built with") from None

    def lang(self, instr: torch.Tensor) -> torch.Tensor:
        """[n] int64 instruction indices -> [n, lang_dim] embeddings."""
        table = self.embed(self.instr_ids, self.instr_offsets)  # [n_instructions, lang_dim]
        return table[instr]

    def mean(self, obs: torch.Tensor, instr: torch.Tensor) -> torch.Tensor:
        """obs [..., 39] float32, instr [...] int64 -> action mean [..., 4]."""
        shape = obs.shape[:-1]
        o = ((obs.reshape(-1, self.cfg.obs_dim) - self.obs_mean) / self.obs_std).clamp(-10, 10)
        x = torch.cat([o, self.lang(instr.reshape(-1))], dim=-1)
        return self.mlp(x).reshape(*shape, self.cfg.act_dim)

    def log_prob(self, obs: torch.Tensor, instr: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Exact log pi(a | s, e): obs [..., 39], instr [...], actions [..., 4] -> [...] float32."""
        mu = self.mean(obs, instr)
        ls = self.log_std
        z = (actions - mu) / ls.exp()
        return (-0.5 * z.pow(2) - ls - 0.5 * math.log(2 * math.pi)).sum(-1)

    @torch.no_grad()
    def act(self, obs: np.ndarray, instr: np.ndarray, rng: torch.Generator | None) -> tuple[np.ndarray, np.ndarray]:
        """Sample a ~ pi (``rng`` given) or take the mean (``rng`` None); returns (actions [n, 4], log-probs [n])."""
        o = torch.as_tensor(obs, dtype=torch.float32)
        i = torch.as_tensor(instr, dtype=torch.int64)
        mu = self.mean(o, i)
        if rng is None:
            a = mu
        else:
            a = mu + self.log_std.exp() * torch.randn(mu.shape, generator=rng)
        return a.numpy(), self.log_prob(o, i, a).numpy()

    # ---------------------------------------------------------------- persistence
    def save(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        torch.save({"state_dict": self.state_dict(), "instructions": self.instructions,
                    "cfg": self.cfg.__dict__}, path / "policy.pt")

    @classmethod
    def load(cls, path: Path) -> GaussianPolicy:
        d = torch.load(Path(path) / "policy.pt", weights_only=False)
        p = cls(d["instructions"], PolicyConfig(**d["cfg"]))
        p.load_state_dict(d["state_dict"])
        return p


@dataclass
class Demos:
    """Demonstration transitions: obs [N, 39] float32, actions [N, 4] float32 (clean expert labels),
    instr [N] int64; plus per-episode visited observations (for the progress predictor)."""

    obs: np.ndarray
    actions: np.ndarray
    instr: np.ndarray
    episodes: list[tuple[np.ndarray, int, bool]]  # (visited obs [L+1, 39], instruction index, success)


def behaviour_clone(policy: GaussianPolicy, demos: Demos, *, epochs: int, lr: float, batch_size: int,
                    seed: int) -> dict[str, Any]:
    """Fit the policy mean to the expert actions by MSE (Adam), then set log_std = log(init_std).

    Returns:
        {"bc_loss_first", "bc_loss_last", "n_transitions", "epochs"}.
    """
    if demos.obs.shape[0] == 0:
        raise ValueError("no demonstration transitions to clone")
    g = torch.Generator().manual_seed(seed)
    obs = torch.as_tensor(demos.obs)
    act = torch.as_tensor(demos.actions)
    ins = torch.as_tensor(demos.instr)
    policy.obs_mean.copy_(obs.mean(0))
    policy.obs_std.copy_(obs.std(0).clamp(min=1e-3))
    opt = torch.optim.Adam([p for n, p in policy.named_parameters() if n != "log_std"], lr=lr)
    n = obs.shape[0]
    losses = []
    for _ in range(epochs):
        perm = torch.randperm(n, generator=g)
        tot = 0.0
        for s in range(0, n, batch_size):
            b = perm[s:s + batch_size]
            loss = (policy.mean(obs[b], ins[b]) - act[b]).pow(2).sum(-1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += float(loss.detach()) * b.numel()
        losses.append(tot / n)
    with torch.no_grad():
        policy.log_std.fill_(math.log(policy.cfg.init_std))
    return {"bc_loss_first": losses[0] if losses else None, "bc_loss_last": losses[-1] if losses else None,
            "n_transitions": int(n), "epochs": int(epochs)}
