"""The generative world model: the WMRL paper's judge on the agent's own backbone and its own adapter.

As the WMRL paper's world model (a prompted generative judge, read from its public reference implementation), it
writes the predicted outcome of a program as structured output::

    <input text>
    ### Outcome
    {"status": "valid", "quality": "high"}

after two deterministic gates that need no model (:func:`wmrl.world_model.outcome.gate_status`: no code, or
code that does not compile, is a certain syntax error with reward 0). ``status`` is one of ``runtime_error``
(a crash, a timeout or a memory limit), ``no_submission`` (it ran but wrote no gradable submission) and
``valid``; ``quality``, written for valid programs, one of the WMRL paper's four buckets of leaderboard position:

    =========  =====================  ============================
    bucket     position (percentile)  position the bucket stands for
    =========  =====================  ============================
    low        below 0.1              0.05
    fair       0.1 to 0.3             0.20
    mid        0.3 to 0.6             0.45
    high       0.6 and above          0.75
    =========  =====================  ============================

(the cut points 0.1 / 0.3 / 0.6 and positions 0.05 / 0.20 / 0.45 / 0.75 are the WMRL paper's). The reward of each
outcome comes from a :class:`~wmrl.world_model.outcome.RewardLadder`: ``percentile`` (the default: failures 0,
a valid program its position, the scale of wmrl's executed reward) or ``paper`` (runtime error 0.1, no
submission 0.2, valid 0.5 + 0.5 x position).

Prediction does not sample. With the answer's fixed text teacher-forced, it reads the distribution of the
status over the first tokens of the three status words (softmax of their logits: the next-token distribution
conditioned on the answer being one of them), then, with ``valid`` teacher-forced (one more decoding pass from
the KV cache), the distribution of the quality over the four bucket words. The outcome distribution is
``P(status) x P(quality | valid)``; the predicted reward is its expected ladder reward and the reward std its
standard deviation, so the uncertainty is the judge's own. Training (:meth:`GenerativeWorldModel.fit`) is the
same conditioned cross-entropy on the executed outcome (status always, quality for valid programs), through
the adapter only. Cost: one forward pass over input and answer prefix, plus a few tokens for the quality;
trajectories sharing a prompt (a GRPO group) run the prompt once from its KV cache.

The backbone is the same base model object as the policy's: the world model's adapter is a second named adapter
on the shared peft wrapper (:mod:`wmrl.models.adapters`). The vocabulary projection is the backbone's own
(``get_output_embeddings()``). The status words must start with three different tokens and the bucket words
with four (:func:`answer_tokens`; true for SmolLM2's tokenizer).

Why one file of about 500 lines: the answer format, its decoding and its training loss are one contract and
change together.
"""
from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from wmrl.models import adapters
from wmrl.models.types import LoraSettings
from wmrl.world_model.base import BackboneWorldModel
from wmrl.world_model.data import check_fit_settings, fit_metrics, fit_split
from wmrl.world_model.outcome import LADDERS, OutcomePrediction, RewardLadder, gated

__all__ = ["GenerativeWorldModel", "AnswerTokens", "answer_tokens", "answer_text", "quality_bucket", "OUTCOME_CUE",
           "QUALITY_BUCKETS", "QUALITY_CUTS", "QUALITY_POSITIONS", "JUDGE_STATUSES"]

#: the text between the program and the answer
OUTCOME_CUE = "\n### Outcome\n"
#: the statuses the judge writes (the gate gives ``syntax_error``), in STATUS_CLASSES order
JUDGE_STATUSES: tuple[str, ...] = ("runtime_error", "no_submission", "valid")
#: the WMRL paper's quality buckets of a valid program, lowest first
QUALITY_BUCKETS: tuple[str, ...] = ("low", "fair", "mid", "high")
#: the WMRL paper's cut points between the buckets, on the leaderboard position (percentile)
QUALITY_CUTS: tuple[float, ...] = (0.1, 0.3, 0.6)
#: the position each bucket stands for (the WMRL paper's)
QUALITY_POSITIONS: tuple[float, ...] = (0.05, 0.20, 0.45, 0.75)
_LORA_DEFAULT = LoraSettings(r=8, alpha=16)


def quality_bucket(position: float) -> int:
    """The index in :data:`QUALITY_BUCKETS` of a valid program at leaderboard ``position`` (percentile):
    0 below 0.1, 1 below 0.3, 2 below 0.6, else 3.

    Raises:
        ValueError: ``position`` is not a finite number.
    """
    p = float(position)
    if not np.isfinite(p):
        raise ValueError(f"a leaderboard position must be a finite number, got {position!r}")
    return int(sum(p >= c for c in QUALITY_CUTS))


def answer_text(status: str, quality: str | None = None) -> str:
    """The structured answer for one outcome, e.g. ``{"status": "valid", "quality": "high"}``.

    Raises:
        ValueError: an unknown status or bucket, or a quality for a failure / none for a valid program.
    """
    if status not in JUDGE_STATUSES:
        raise ValueError(f"the judge writes a status among {', '.join(JUDGE_STATUSES)}, not {status!r}")
    if (status == "valid") != (quality is not None):
        raise ValueError("a valid program has a quality bucket, a failure none")
    if quality is None:
        return json.dumps({"status": status})
    if quality not in QUALITY_BUCKETS:
        raise ValueError(f"unknown quality bucket {quality!r}; known: {', '.join(QUALITY_BUCKETS)}")
    return json.dumps({"status": status, "quality": quality})


def _tokenizer_name(tokenizer: Any) -> str:
    return str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)


@dataclass(frozen=True)
class AnswerTokens:
    """Token ids of the answer format for one tokenizer.

    Attributes:
        status_prefix: the cue and answer text before the status word (teacher-forced).
        status_ids: [3] the first token of each status word (JUDGE_STATUSES order).
        quality_prefix: the tokens after ``status_prefix`` up to the quality word, with ``valid`` written.
        quality_ids: [4] the first token of each bucket word (QUALITY_BUCKETS order).
        answers: the full answer tokens of each outcome, ``(status, quality)`` -> ids after ``status_prefix``.
    """

    status_prefix: list[int]
    status_ids: list[int]
    quality_prefix: list[int]
    quality_ids: list[int]
    answers: dict[tuple[str, str | None], list[int]]


def _common_prefix(seqs: list[list[int]]) -> int:
    n = min(len(s) for s in seqs)
    for i in range(n):
        if len({s[i] for s in seqs}) > 1:
            return i
    return n


def answer_tokens(tokenizer: Any) -> AnswerTokens:
    """The answer format's token ids under ``tokenizer``, from the tokenisation of every whole answer.

    Raises:
        ValueError: the status words, or the bucket words, do not start with distinct tokens right after a
            common prefix (the message names the tokenizer; use the regression kind with it).
    """
    def ids(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    outcomes = [(s, None) for s in JUDGE_STATUSES[:-1]] + [("valid", q) for q in QUALITY_BUCKETS]
    full = {o: ids(OUTCOME_CUE + answer_text(*o)) for o in outcomes}
    a = _common_prefix(list(full.values()))
    firsts = {o: seq[a] if a < len(seq) else None for o, seq in full.items()}
    status_ids = [firsts[(s, None)] if s != "valid" else firsts[("valid", "low")] for s in JUDGE_STATUSES]
    valid = [full[("valid", q)] for q in QUALITY_BUCKETS]
    if (None in status_ids or len(set(status_ids)) != 3
            or any(firsts[("valid", q)] != status_ids[2] for q in QUALITY_BUCKETS)):
        raise ValueError(f"tokenizer {_tokenizer_name(tokenizer)!r}: the status words do not start with three "
                         "distinct tokens after a common prefix; the generative world model cannot read its answer "
                         "(use world_model.kind 'regression' with this backbone)")
    b = _common_prefix(valid)
    q_ids = [seq[b] if b < len(seq) else None for seq in valid]
    if None in q_ids or len(set(q_ids)) != 4:
        raise ValueError(f"tokenizer {_tokenizer_name(tokenizer)!r}: the quality words do not start with four "
                         "distinct tokens; use world_model.kind 'regression' with this backbone")
    prefix = full[outcomes[0]][:a]
    # no None left in either list (checked above)
    return AnswerTokens(status_prefix=prefix, status_ids=[x for x in status_ids if x is not None],
                        quality_prefix=valid[0][a:b], quality_ids=[x for x in q_ids if x is not None],
                        answers={o: seq[a:] for o, seq in full.items()})


class GenerativeWorldModel(BackboneWorldModel):
    """Predicts the outcome of a (prompt, completion) trajectory as the WMRL paper's judge writes it (module docstring).

    Args:
        model: the backbone (a transformers causal LM) or the policy's ``PeftModel`` (shared).
        tokenizer: its tokenizer (:func:`answer_tokens` must accept it).
        lora: adapter settings (required: the adapter is all this world model learns).
        adapter_name: name of the world model's adapter on the shared peft model.
        max_length: tokens per input including the cue and the answer; longer inputs lose their beginning
            (the cue and the answer are never cut).
        batch_size: rows per forward pass in :meth:`predict_outcome`.
        ladder: ``"percentile"`` or ``"paper"`` (:data:`wmrl.world_model.outcome.LADDERS`).

    Raises:
        ValueError: ``lora`` is None, an unknown ladder, a tokenizer :func:`answer_tokens` refuses,
            ``max_length`` leaving no room for the input, or the adapter name taken on the shared model.
    """

    kind = "generative"

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        lora: LoraSettings | None = _LORA_DEFAULT,
        *,
        adapter_name: str = "world_model",
        max_length: int = 320,
        batch_size: int = 16,
        ladder: str = "percentile",
    ):
        if lora is None:
            raise ValueError("the generative world model learns only through its LoRA adapter: give it lora "
                             "settings (a frozen backbone with a trained head is RegressionWorldModel(lora=None))")
        if ladder not in LADDERS:
            raise ValueError(f"unknown reward ladder {ladder!r}; known: {', '.join(LADDERS)}")
        # checked before the adapter is attached, so a refused tokenizer leaves the shared model unchanged
        tokens = answer_tokens(tokenizer)
        longest = len(tokens.status_prefix) + max(len(a) for a in tokens.answers.values())
        if int(max_length) < longest + 1:
            raise ValueError(f"max_length={max_length} leaves no room for the input: the cue and answer take "
                             f"{longest} tokens")
        super().__init__(model, tokenizer, lora, adapter_name=adapter_name, max_length=max_length,
                         batch_size=batch_size)
        #: the answer format's token ids
        self.tokens = tokens
        #: the rewards of the outcomes
        self.ladder: RewardLadder = LADDERS[ladder]

    # ---------------------------------------------------------------- forward
    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        """[..., H] final-layer hidden states -> [..., V] float32 next-token logits (the backbone's output
        embedding, with this world model's adapter active in the layers below)."""
        return self._base.get_output_embeddings()(h).float()

    def _choice_logits(self, h: torch.Tensor, ids: Sequence[int]) -> torch.Tensor:
        """[B, H] hidden states -> [B, K] float32 logits of the K candidate tokens ``ids``."""
        return self._logits(h)[:, torch.tensor(list(ids), dtype=torch.long, device=h.device)]

    def loss(self, prompts: Sequence[str], completions: Sequence[str], rewards: Sequence[float],
             statuses: Sequence[str]) -> torch.Tensor:
        """Mean conditioned cross-entropy of the executed outcome (nats per answer choice), with grad.

        Each row is the input (left-truncated) + the status prefix + the executed outcome's answer tokens; the
        status is scored by a softmax over the three status tokens at its position, and for a valid program the
        quality (:func:`quality_bucket` of its reward) by a softmax over the four bucket tokens at its position.

        Args:
            prompts, completions: B texts each. rewards: B executed rewards (finite). statuses: B judge statuses
                (:data:`JUDGE_STATUSES`).

        Returns:
            scalar float32 tensor.

        Raises:
            TypeError / ValueError: bad or mismatched inputs, an unknown status, an empty batch.
        """
        self._check_inputs(prompts, completions)
        if not (len(rewards) == len(statuses) == len(prompts)):
            raise ValueError(f"{len(prompts)} prompts but {len(rewards)} rewards and {len(statuses)} statuses")
        if len(prompts) == 0:
            raise ValueError("loss() needs at least one trajectory")
        t = self.tokens
        outcomes = [(s,
                     QUALITY_BUCKETS[quality_bucket(r)] if s == "valid" else None) for s, r in zip(statuses, rewards)]
        for s, _ in outcomes:
            if s not in JUDGE_STATUSES:
                raise ValueError(f"status {s!r} is not one the judge writes ({', '.join(JUDGE_STATUSES)})")
        suffixes = [t.status_prefix + t.answers[o] for o in outcomes]
        enc = self._encode(list(prompts), list(completions), suffixes)
        am = enc["attention_mask"]
        pos = (am.cumsum(-1) - 1).clamp(min=0)
        h = self._decoder(input_ids=enc["input_ids"], attention_mask=am, position_ids=pos,
                          use_cache=False).last_hidden_state
        T = h.shape[1]
        rows = torch.arange(len(prompts), device=h.device)
        # left padding: each row's suffix fills its last columns; position c - 1 predicts the token at c
        s_col = torch.tensor([T - len(sfx) + len(t.status_prefix) - 1 for sfx in suffixes], device=h.device)
        s_target = torch.tensor([JUDGE_STATUSES.index(s) for s, _ in outcomes], device=h.device)
        loss = torch.nn.functional.cross_entropy(self._choice_logits(h[rows, s_col], t.status_ids), s_target,
                                                 reduction="sum")
        valid = [i for i, (s, _) in enumerate(outcomes) if s == "valid"]
        if valid:
            vi = torch.tensor(valid, device=h.device)
            q_col = torch.tensor([T - len(suffixes[i]) + len(t.status_prefix) + len(t.quality_prefix) - 1
                                  for i in valid], device=h.device)
            q_target = torch.tensor([QUALITY_BUCKETS.index(outcomes[i][1]) for i in valid], device=h.device)
            loss = loss + torch.nn.functional.cross_entropy(self._choice_logits(h[vi, q_col], t.quality_ids),
                                                            q_target, reduction="sum")
        return loss / (len(prompts) + len(valid))

    def _quality(self, cache: Any, attention_mask: torch.Tensor, next_pos: torch.Tensor) -> torch.Tensor:
        """One decoding pass of the quality prefix (``valid`` written) from ``cache`` at positions ``next_pos`` [B]
        (``attention_mask`` [B, S] covers the cached S positions); returns [B, 4] bucket probabilities."""
        q = torch.tensor(self.tokens.quality_prefix, dtype=torch.long, device=attention_mask.device)
        B, k = attention_mask.shape[0], len(q)
        am = torch.cat([attention_mask,
                        torch.ones((B, k), dtype=attention_mask.dtype, device=attention_mask.device)], 1)
        out = self._decoder(input_ids=q.expand(B, k), attention_mask=am,
                            position_ids=next_pos.view(B, 1) + torch.arange(k, device=am.device).view(1, k),
                            cache=cache, use_cache=True)
        return torch.softmax(self._choice_logits(out.last_hidden_state[:, -1, :].float(), self.tokens.quality_ids), -1)

    @torch.no_grad()
    def outcome_distributions(self, prompts: Sequence[str], completions: Sequence[str],
                              share_prompts: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """The answer's distributions for N trajectories (no grad, batched; no gate).

        Returns:
            ``(p_status, p_quality)``: float64 [N, 3] over :data:`JUDGE_STATUSES` and [N, 4] over
            :data:`QUALITY_BUCKETS` given ``valid``; rows sum to 1. Trajectories that share a prompt run it
            once (``share_prompts``; the same values as separate passes up to float rounding).

        Raises:
            TypeError / ValueError: see :meth:`predict_outcome`.
        """
        self._check_inputs(prompts, completions)
        n = len(prompts)
        ps = torch.zeros((n, 3), dtype=torch.float32)
        pq = torch.zeros((n, 4), dtype=torch.float32)
        prefix = self.tokens.status_prefix
        shared, rest = self._plan(prompts, completions, prefix, share_prompts)
        for p_ids, sub, c_ids in shared:
            o = self._shared_prompt_forward(p_ids, c_ids)
            rows = torch.arange(len(sub), device=o["hc"].device)
            h = o["hc"][rows, o["lens"] - 1]
            ps[sub] = torch.softmax(self._choice_logits(h, self.tokens.status_ids), -1).cpu()
            pq[sub] = self._quality(o["cache"], o["attention_mask"], len(p_ids) + o["lens"]).cpu()
        for sub in rest:
            enc = self._encode([prompts[i] for i in sub], [completions[i] for i in sub], [prefix] * len(sub))
            am = enc["attention_mask"]
            pos = (am.cumsum(-1) - 1).clamp(min=0)
            out = self._decoder(input_ids=enc["input_ids"], attention_mask=am, position_ids=pos, use_cache=True)
            cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
            ps[sub] = torch.softmax(self._choice_logits(out.last_hidden_state[:, -1, :].float(),
                                                        self.tokens.status_ids), -1).cpu()
            pq[sub] = self._quality(cache, am, am.sum(-1)).cpu()
        return ps.double().numpy(), pq.double().numpy()

    def outcome_from_distributions(self, p_status: np.ndarray, p_quality: np.ndarray) -> OutcomePrediction:
        """Reward, status distribution and reward std of outcome distributions (module docstring), under the
        ladder: ``E[r]`` and ``sqrt(E[r^2] - E[r]^2)`` over the 2 failures and the 4 valid buckets."""
        fail = self.ladder.failure_rewards()[1:]  # runtime error, no submission
        vals = self.ladder.valid_reward(np.array(QUALITY_POSITIONS))
        p = np.concatenate([p_status[:, :2], p_status[:, 2:3] * p_quality], axis=1)  # [N, 6]
        r = np.concatenate([fail, vals])
        mean = p @ r
        std = np.sqrt(np.clip(p @ (r ** 2) - mean ** 2, 0.0, None))
        probs = np.concatenate([np.zeros((len(p), 1)), p_status], axis=1)
        return OutcomePrediction(mean, probs, std)

    @torch.no_grad()
    def predict_outcome(self, prompts: Sequence[str], completions: Sequence[str],
                        share_prompts: bool = True) -> OutcomePrediction:
        """The outcome of N trajectories: the gate first, then the judge's distributions (module docstring).

        Raises:
            TypeError: ``prompts`` / ``completions`` are not sequences of strings.
            ValueError: they differ in length.
        """
        self._check_inputs(prompts, completions)
        prompts, completions = list(prompts), list(completions)

        def model(idx: list[int]) -> OutcomePrediction:
            ps, pq = self.outcome_distributions([prompts[i] for i in idx], [completions[i] for i in idx],
                                                share_prompts=share_prompts)
            return self.outcome_from_distributions(ps, pq)

        return gated(completions, model)

    def predict(self, prompts: Sequence[str], completions: Sequence[str], share_prompts: bool = True) -> np.ndarray:
        """Predicted rewards for N trajectories, float64 [N]: ``predict_outcome(...).reward``; deterministic.

        Raises:
            TypeError / ValueError: as :meth:`predict_outcome`.
        """
        return self.predict_outcome(prompts, completions, share_prompts=share_prompts).reward

    # ---------------------------------------------------------------- training
    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """This world model's LoRA weights (the only weights it trains)."""
        adapters.activate(self.peft_model, self.adapter_name)
        return adapters.adapter_parameters(self.peft_model, self.adapter_name)

    def fit(
        self,
        records: Sequence[Any],
        epochs: int = 3,
        lr: float = 3e-4,
        batch_size: int = 8,
        heldout_fraction: float = 0.2,
        seed: int = 0,
        *,
        log_every: int = 0,
        time_budget_s: float | None = None,
    ) -> dict[str, Any]:
        """Fine-tune the adapter on the executed outcomes (:meth:`loss`), AdamW.

        Rows the gate settles (``syntax_error``) and rows without a known outcome class are left out of the
        training split (the gate answers them without the model); they stay in the reported metrics.

        Args:
            records: execution-log rows (see :mod:`wmrl.world_model.regression`) or
                :class:`~wmrl.world_model.data.WorldModelExample` dicts with ``status``.
            epochs: passes over the training split.
            lr: AdamW learning rate of the LoRA weights (no weight decay; gradient norm clipped at 1).
            batch_size: trajectories per gradient step.
            heldout_fraction: fraction of *groups* held out for the metrics (0 = none).
            seed: split and shuffling (the adapter's initialisation follows torch's global RNG).
            log_every: print the running loss every this many steps (0 = silent).
            time_budget_s: stop training after this many wall seconds (the metrics are still computed).

        Returns:
            dict with ``n_train``, ``n_heldout``, ``n_judged`` (training rows past the gate), ``skipped``
            counts, ``steps``, ``train_seconds``, ``train_loss`` (last epoch's mean cross-entropy, nats per
            answer choice), ``stopped_by_time_budget`` and the entries of
            :func:`~wmrl.world_model.data.fit_metrics`, as
            :meth:`RegressionWorldModel.fit <wmrl.world_model.regression.RegressionWorldModel.fit>`.

        Raises:
            ValueError: fewer than 2 usable records, or bad hyperparameters.
        """
        check_fit_settings(epochs, lr, batch_size)
        train, held, counts = fit_split(records, heldout_fraction, seed)
        judged = [e for e in train if e.get("status") in JUDGE_STATUSES]
        params = self.trainable_parameters()
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
        rng = random.Random(seed)
        t0 = time.perf_counter()
        step = 0
        last_epoch_loss = float("nan")
        stopped = False
        for ep in range(epochs if judged else 0):
            order = list(range(len(judged)))
            rng.shuffle(order)
            losses: list[float] = []
            for s in range(0, len(order), batch_size):
                bt = [judged[i] for i in order[s:s + batch_size]]
                loss = self.loss([e["prompt"] for e in bt], [e["completion"] for e in bt], [e["reward"] for e in bt],
                                 [e["status"] for e in bt])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                opt.step()
                losses.append(float(loss.detach()))
                step += 1
                if log_every and step % log_every == 0:
                    print(f"  world model step {step}: cross-entropy {np.mean(losses[-log_every:]):.4f}", flush=True)
                if time_budget_s is not None and time.perf_counter() - t0 > time_budget_s:
                    stopped = True
                    break
            last_epoch_loss = float(np.mean(losses)) if losses else float("nan")
            self.history.append({"epoch": ep, "loss": last_epoch_loss})
            if stopped:
                break
        result: dict[str, Any] = {
            "n_train": len(train),
            "n_heldout": len(held),
            "n_judged": len(judged),
            "skipped": counts,
            "steps": step,
            "train_seconds": time.perf_counter() - t0,
            "train_loss": last_epoch_loss,
            "stopped_by_time_budget": stopped,
        }
        result.update(fit_metrics(self, train, held))
        return result

    # ---------------------------------------------------------------- persistence
    def config(self) -> dict[str, Any]:
        """The settings needed to rebuild this world model (JSON-serialisable), with the answer format."""
        cfg = super().config()
        cfg["ladder"] = self.ladder.name
        cfg["answer"] = {"cue": OUTCOME_CUE, "statuses": list(JUDGE_STATUSES), "buckets": list(QUALITY_BUCKETS),
                         "cuts": list(QUALITY_CUTS), "positions": list(QUALITY_POSITIONS),
                         "status_token_ids": list(self.tokens.status_ids),
                         "quality_token_ids": list(self.tokens.quality_ids)}
        return cfg

    @classmethod
    def _saved_kwargs(cls, cfg: dict[str, Any]) -> dict[str, Any]:
        return {"ladder": str(cfg.get("ladder", "percentile"))}

    def state_dict(self) -> dict[str, Any]:
        """``{"config": ..., "adapter": LoRA tensors}`` (tensors on CPU)."""
        return {"config": self.config(), "adapter": self._adapter_state()}

    def save(self, directory: str | Path) -> Path:
        """Write ``world_model.json`` (kind ``generative``, answer format, ladder) and the adapter to ``directory``."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        (d / "world_model.json").write_text(json.dumps(self.config(), indent=2))
        assert self.lora is not None  # required by __init__
        adapters.save_adapter(self.peft_model, self.adapter_name, d, self.lora)
        return d

    def _load_into(self, directory: str | Path) -> GenerativeWorldModel:
        """Instance form of :meth:`load`: ``wm.load(dir)`` loads the saved adapter into this world model.

        Raises:
            FileNotFoundError: nothing saved there.
            ValueError: the folder holds another kind of world model, one saved in an earlier answer format
                (refit it), one fitted with a tokenizer whose answer tokens differ, or an adapter that does not fit.
        """
        d = Path(directory)
        self._check_saved_kind(d)
        if (d / "world_model.json").is_file():
            ans = self.read_saved_config(d).get("answer") or {}
            if "status_token_ids" not in ans:
                raise ValueError(f"the generative world model in {d} writes an earlier answer format (a score); "
                                 "refit it with 'wmrl wm fit --kind generative'")
            for key, mine in (("status_token_ids", self.tokens.status_ids),
                              ("quality_token_ids", self.tokens.quality_ids)):
                if list(ans[key]) != list(mine):
                    raise ValueError(f"the world model in {d} was fitted with {key} {ans[key]}, this tokenizer "
                                     f"({_tokenizer_name(self.tokenizer)!r}) gives {mine}: another tokenizer")
        adapters.load_adapter(self.peft_model, self.adapter_name, d)
        return self
