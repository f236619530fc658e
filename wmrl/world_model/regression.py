"""The regression world model: the agent's backbone + its own LoRA adapter + a scalar reward head.

``r_hat = clip(w . (f - mu) / sd + b, 0, 1)`` with ``f = [h_last ; h_mean]``: ``h_last`` is the
final-layer hidden state (after the final norm) of the last token of the world model's input text
(prompt, a separator, completion) and ``h_mean`` the mean over its tokens; ``mu``/``sd`` standardise
the features with training-split statistics. With ``program_features=P > 0`` the P hashed 0/1
program-choice features of :mod:`wmrl.world_model.program_features` follow (not standardised). With
``residual_neighbours=K > 0`` the prediction adds the kernel-weighted residual of the K executed training rows of
the same prompt nearest in feature space (:mod:`wmrl.world_model.neighbours`), before the clip. The target is the
executed reward (leaderboard percentile, docs/tasks.md); the loss is the mean squared error (unclipped output). Fitting
first solves the head in closed form (ridge regression, penalty chosen by group K-fold), then, with an
adapter, fine-tunes LoRA and head jointly by AdamW. The backbone is the same base model object as
the policy's: the world model adds a second named LoRA adapter (``"world_model"``) to the shared
peft wrapper (see :mod:`wmrl.models.adapters`), so no second copy of the weights is held. With
``lora=None`` the backbone stays frozen and only the head is trained (fast on CPU: features are
computed once).

Records for :meth:`RegressionWorldModel.fit` are execution-log rows (dicts) with ``reward``,
``status`` and ``meta`` holding ``prompt``, ``completion``, ``group_id`` (and ``task_id``,
``step``); ``infra_error`` rows and rows without a reward are skipped.

What every world model on the shared backbone needs (adapter on the shared peft model, input text,
tokenisation and truncation, the shared-prompt KV-cache pass, batch planning, settings and adapter
persistence) is in :class:`wmrl.world_model.base.BackboneWorldModel`; the examples, the data split and the report
metrics of a fit in :mod:`wmrl.world_model.data`. The generative variant
(:mod:`wmrl.world_model.generative`) builds on them.

Why one file of about 590 lines: the reward head, the outcome head and the fit that solves both on one feature pass
belong together; the shared backbone machinery is in :mod:`wmrl.world_model.base`, the residual neighbours in
:mod:`wmrl.world_model.neighbours`.
"""
from __future__ import annotations

import json
import random
import time
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from wmrl.models import adapters
from wmrl.models.types import LoraSettings
from wmrl.world_model.base import BackboneWorldModel
from wmrl.world_model.data import check_fit_settings, fit_metrics, fit_split
from wmrl.world_model.feature_cache import FeatureCache, trajectory_key, weights_fingerprint
from wmrl.world_model.neighbours import ResidualNeighbours
from wmrl.world_model.outcome import STATUS_CLASSES, OutcomePrediction, gated
from wmrl.world_model.program_features import program_features

__all__ = ["OutcomeHead", "RegressionWorldModel", "RewardHead", "ridge_fit"]

_LORA_DEFAULT = LoraSettings(r=8, alpha=16)


class RewardHead(torch.nn.Module):
    """Linear reward head on standardised features: ``w . (f - mu) / sd + b`` (unclipped).

    ``mu`` and ``sd`` ([D] float32 buffers) are set from the training features at the first fit
    (``sd`` floored at 1e-6), so the head sees unit-scale inputs whatever the backbone's hidden
    state magnitudes (SmolLM2's reach |h| ~ 37). Predictions are clipped to [0, 1] by the world
    model, not here, so that the training loss keeps its gradient outside the range.
    """

    mu: torch.Tensor  # buffers (register_buffer), typed for the type checker
    sd: torch.Tensor

    def __init__(self, dim: int):
        super().__init__()
        self.linear = torch.nn.Linear(dim, 1)
        torch.nn.init.zeros_(self.linear.weight)
        torch.nn.init.zeros_(self.linear.bias)
        self.register_buffer("mu", torch.zeros(dim))
        self.register_buffer("sd", torch.ones(dim))

    def standardise(self, feats: torch.Tensor) -> torch.Tensor:
        """[B, D] -> [B, D] standardised features."""
        return (feats - self.mu) / self.sd

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        """[B, D] features -> [B] unclipped reward predictions."""
        return self.linear(self.standardise(feats)).squeeze(-1)


def ridge_fit(Z: np.ndarray, y: np.ndarray, groups: Sequence[Hashable],
              alphas: Sequence[float] = (1.0, 10.0, 100.0, 1000.0),
              seed: int = 0) -> tuple[np.ndarray, float, float, float]:
    """Closed-form ridge regression of ``y`` on standardised features ``Z``, alpha by group K-fold.

    Args:
        Z: [N, D] standardised features; y: [N] rewards; groups: N group keys (folds never split a
            group, so the chosen alpha is the one that generalises to unseen groups).
        alphas: candidate L2 penalties (sklearn ``Ridge`` convention: ``||y - Zw - b||^2 + alpha ||w||^2``).

    Returns:
        ``(w [D], b, alpha, cv_mse)``: ``cv_mse`` is the group K-fold mean squared error of the chosen alpha
        (NaN with fewer than 3 groups or one candidate: no folds were run).
    """
    from sklearn.linear_model import Ridge  # noqa: PLC0415 - heavy (sklearn)
    from sklearn.model_selection import GroupKFold  # noqa: PLC0415 - heavy (sklearn)

    keys = [repr(g) for g in groups]
    n_groups = len(set(keys))
    best = (float("inf"), alphas[0])
    if n_groups >= 3 and len(alphas) > 1:
        cv = GroupKFold(n_splits=min(5, n_groups))
        for a in alphas:
            err = 0.0
            for tr, te in cv.split(Z, y, keys):
                r = Ridge(alpha=a).fit(Z[tr], y[tr])
                err += float(((r.predict(Z[te]) - y[te]) ** 2).sum())
            if err < best[0]:
                best = (err, a)
    alpha = best[1]
    r = Ridge(alpha=alpha).fit(Z, y)
    cv_mse = best[0] / len(y) if np.isfinite(best[0]) else float("nan")
    return np.asarray(r.coef_, dtype=np.float64), float(r.intercept_), float(alpha), float(cv_mse)


_MODEL_CLASSES = ("runtime_error", "no_submission", "valid")  # the outcome classes past the gate


class OutcomeHead(torch.nn.Module):
    """The regression kind's outcome status and reward uncertainty, on the reward head's standardised features.

    Status: a multinomial logistic regression over the classes past the deterministic gate (runtime error, no
    submission, valid), with the reward head's ridge penalty (``C = 1 / (2 alpha)``: sklearn's
    ``C * sum(log loss) + ||w||^2 / 2`` against ridge's ``alpha ||w||^2``), mixed with the uniform distribution at
    weight ``eps = 3 / (N + 3)`` (add-one smoothing: a class never seen in N training rows keeps a small probability);
    with one class seen, that class at ``(N + 1) / (N + 3)``. Reward uncertainty: the predictive standard deviation of
    ridge regression read as a Bayesian linear model (Bishop 2006, "Pattern Recognition and Machine Learning", eq.
    3.59), ``std(z) = sigma * sqrt(1 + (z - z_bar)' (Zc' Zc + alpha I)^-1 (z - z_bar))`` with ``Zc`` the centred
    training features and ``sigma^2`` the ridge fit's group K-fold mean squared error (the training error where
    no folds ran). Buffers: ``status_w`` [3, D], ``status_b`` [3], ``eps`` [], ``cov`` [D, D], ``z_bar`` [D],
    ``sigma2`` [] (float32), ``fitted`` [] (0 until :meth:`fit`).
    """

    status_w: torch.Tensor  # buffers (register_buffer), typed for the type checker
    status_b: torch.Tensor
    eps: torch.Tensor
    cov: torch.Tensor
    z_bar: torch.Tensor
    sigma2: torch.Tensor
    fitted: torch.Tensor

    def __init__(self, dim: int):
        super().__init__()
        self.register_buffer("status_w", torch.zeros(len(_MODEL_CLASSES), dim))
        self.register_buffer("status_b", torch.zeros(len(_MODEL_CLASSES)))
        self.register_buffer("eps", torch.tensor(1.0))
        self.register_buffer("cov", torch.zeros(dim, dim))
        self.register_buffer("z_bar", torch.zeros(dim))
        self.register_buffer("sigma2", torch.tensor(0.0))
        self.register_buffer("fitted", torch.tensor(0.0))

    def fit(self, Z: np.ndarray, statuses: Sequence[str | None], alpha: float, sigma2: float, seed: int = 0) -> None:
        """Fit both parts on standardised features ``Z`` [N, D] (float64) and outcome classes (None: unknown,
        left out of the status fit; gated rows, ``syntax_error``, too)."""
        from sklearn.linear_model import LogisticRegression  # noqa: PLC0415 - heavy (sklearn)

        d = Z.shape[1]
        Zc = Z - Z.mean(0)
        cov = np.linalg.inv(Zc.T @ Zc + alpha * np.eye(d))
        rows = [i for i, c in enumerate(statuses) if c in _MODEL_CLASSES]
        w = np.zeros((len(_MODEL_CLASSES), d))
        b = np.zeros(len(_MODEL_CLASSES))
        seen = sorted({statuses[i] for i in rows}, key=_MODEL_CLASSES.index)
        if len(seen) >= 2:
            y = [statuses[i] for i in rows]
            clf = LogisticRegression(C=0.5 / max(alpha, 1e-6), max_iter=2000, random_state=seed)
            clf.fit(Z[rows], y)
            coef = clf.coef_ if len(seen) > 2 else np.vstack([-clf.coef_[0] / 2, clf.coef_[0] / 2])
            icpt = clf.intercept_ if len(seen) > 2 else np.array([-clf.intercept_[0] / 2, clf.intercept_[0] / 2])
            for k, cls in enumerate(clf.classes_):
                w[_MODEL_CLASSES.index(cls)], b[_MODEL_CLASSES.index(cls)] = coef[k], icpt[k]
        absent = [k for k, c in enumerate(_MODEL_CLASSES) if c not in seen]
        b[absent] = -1e4  # never the argmax of the logistic part; the smoothing gives them their share
        with torch.no_grad():
            self.status_w.copy_(torch.as_tensor(w, dtype=torch.float32))
            self.status_b.copy_(torch.as_tensor(b, dtype=torch.float32))
            self.eps.fill_(len(_MODEL_CLASSES) / (len(rows) + len(_MODEL_CLASSES)))
            self.cov.copy_(torch.as_tensor(cov, dtype=torch.float32))
            self.z_bar.copy_(torch.as_tensor(Z.mean(0), dtype=torch.float32))
            self.sigma2.fill_(float(sigma2))
            self.fitted.fill_(1.0)

    def forward(self, Z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Standardised features [B, D] -> (status probabilities [B, 3] over runtime error, no submission, valid;
        predictive reward std [B]), float32."""
        p = torch.softmax(Z @ self.status_w.T + self.status_b, dim=-1)
        p = (1.0 - self.eps) * p + self.eps / len(_MODEL_CLASSES)
        zc = Z - self.z_bar
        lev = ((zc @ self.cov) * zc).sum(-1).clamp(min=0.0)
        return p, torch.sqrt(self.sigma2 * (1.0 + lev))

class RegressionWorldModel(BackboneWorldModel):
    """Predicts the reward of a (prompt, completion) trajectory without executing it.

    Args:
        model: the backbone (a transformers causal LM) or the policy's ``PeftModel`` (shared).
        tokenizer: its tokenizer.
        lora: adapter settings; ``None`` = frozen backbone, only the head is trained.
        adapter_name: name of the world model's adapter on the shared peft model.
        max_length: tokens per input; longer inputs lose their beginning (left truncation keeps the
            program and the end of the prompt).
        batch_size: rows per forward pass in :meth:`predict`.
        program_features: P, hashed program-choice columns appended to the backbone features (0 = none).
        residual_neighbours: K, executed training rows of the same prompt whose kernel-weighted residual corrects
            each prediction (:mod:`wmrl.world_model.neighbours`; 0 = none).
        neighbours_own_program: whether a program's own executed rows count among its neighbours (false: the
            correction never uses the program's own execution).

    Raises:
        ValueError: ``program_features < 0`` or ``residual_neighbours < 0``.

    The head is linear and unconstrained for training; :meth:`predict` clips to [0, 1].
    """

    kind = "regression"

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        lora: LoraSettings | None = _LORA_DEFAULT,
        *,
        adapter_name: str = "world_model",
        max_length: int = 320,
        batch_size: int = 16,
        program_features: int = 0,
        residual_neighbours: int = 0,
        neighbours_own_program: bool = True,
    ):
        super().__init__(model, tokenizer, lora, adapter_name=adapter_name, max_length=max_length,
                         batch_size=batch_size)
        if program_features < 0:
            raise ValueError(f"program_features must be >= 0 (0 = off), got {program_features}")
        if residual_neighbours < 0:
            raise ValueError(f"residual_neighbours must be >= 0 (0 = off), got {residual_neighbours}")
        hidden = int(self._base.config.hidden_size)
        #: columns of hashed program-choice features after the 2H backbone features (0 = none).
        self.program_features = int(program_features)
        self.n_backbone_features = 2 * hidden
        #: the backbone features of trajectories seen before, valid while the weights that computed them are
        #: unchanged (:mod:`wmrl.world_model.feature_cache`); a refit on the corpus and the anchors runs only the
        #: new trajectories through the backbone. ``feature_cache.max_bytes = 0`` turns it off.
        self.feature_cache = FeatureCache()
        self.head = RewardHead(2 * hidden + self.program_features).to(self.device)
        self.outcome_head = OutcomeHead(2 * hidden + self.program_features).to(self.device)
        #: the executed training rows whose residuals correct a prediction (None = off).
        self.neighbours = (ResidualNeighbours(residual_neighbours, own_program=neighbours_own_program)
                           if residual_neighbours else None)

    def _with_program_features(self, feats: torch.Tensor, prompts: Sequence[str],
                               completions: Sequence[str]) -> torch.Tensor:
        """[B, 2H] backbone features -> [B, 2H + P] with the program-choice features appended (P = 0: as is)."""
        if not self.program_features:
            return feats

        prog = torch.as_tensor(program_features(prompts, completions, self.program_features), device=feats.device)
        return torch.cat([feats, prog.to(feats.dtype)], dim=-1)

    def config(self) -> dict[str, Any]:
        """The base settings plus ``program_features`` (P columns; 0 = none), ``residual_neighbours`` (K; 0 =
        none) and ``neighbours_own_program``."""
        return {**super().config(), "program_features": self.program_features,
                "residual_neighbours": self.neighbours.k if self.neighbours else 0,
                "neighbours_own_program": self.neighbours.own_program if self.neighbours else True}

    @classmethod
    def _saved_kwargs(cls, cfg: dict[str, Any]) -> dict[str, Any]:
        return {"program_features": int(cfg.get("program_features", 0)),
                "residual_neighbours": int(cfg.get("residual_neighbours", 0)),
                "neighbours_own_program": bool(cfg.get("neighbours_own_program", True))}

    # ---------------------------------------------------------------- forward
    def _features(self, enc: dict[str, torch.Tensor]) -> torch.Tensor:
        """[B, 2H] float32: last-token and mean hidden states of the final layer."""
        am = enc["attention_mask"]
        pos = (am.cumsum(-1) - 1).clamp(min=0)
        h = self._decoder(input_ids=enc["input_ids"], attention_mask=am, position_ids=pos,
                          use_cache=False).last_hidden_state
        h = h.float()
        last = h[:, -1, :]  # left padding: the last column is every row's last real token
        m = am.unsqueeze(-1).to(h.dtype)
        mean = (h * m).sum(1) / m.sum(1).clamp(min=1.0)
        return torch.cat([last, mean], dim=-1)

    @torch.no_grad()
    def _shared_prompt_features(self, p_ids: list[int], comp_ids: list[list[int]]) -> torch.Tensor:
        """[G, 2H] features of G completions of one prompt, running the prompt once (KV cache).

        Identical to :meth:`_features` on the concatenated sequences (see
        :meth:`BackboneWorldModel._shared_prompt_forward`).
        """
        o = self._shared_prompt_forward(p_ids, comp_ids)
        hp, hc, cm, lens = o["hp"], o["hc"], o["cm"], o["lens"]
        G = len(comp_ids)
        P = len(p_ids)
        last = hc[torch.arange(G, device=hc.device), lens - 1]
        total = hp.sum(1) + (hc * cm.unsqueeze(-1)).sum(1)
        mean = total / (P + lens).unsqueeze(-1).to(total.dtype)
        return torch.cat([last, mean], dim=-1)

    def forward(self, prompts: Sequence[str], completions: Sequence[str]) -> torch.Tensor:
        """[B] float32 unclipped reward predictions, with grad (for training)."""
        feats = self._features(self._encode(prompts, completions))
        return self.head(self._with_program_features(feats, prompts, completions))

    @torch.no_grad()
    def features(self, prompts: Sequence[str], completions: Sequence[str], share_prompts: bool = True) -> torch.Tensor:
        """[N, 2H + P] float32 pooled features (no grad), the P program-choice features last.

        Trajectories that share a prompt (a GRPO group) run the prompt once and only their
        completions after it (``share_prompts``; same values as separate passes); the rest go
        ``batch_size`` rows per forward pass, sorted by length.
        """
        n = len(prompts)
        if len(completions) != n:
            raise ValueError(f"{n} prompts but {len(completions)} completions")
        out = torch.zeros((n, self.n_backbone_features), dtype=torch.float32, device=self.device)
        if n == 0:
            return self._with_program_features(out, prompts, completions)
        cache = self.feature_cache
        todo = list(range(n))
        keys: list[bytes] = []
        if cache.max_bytes:
            cache.validate(weights_fingerprint(self._feature_parameters()))
            keys = [trajectory_key(p, c) for p, c in zip(prompts, completions, strict=True)]
            rows, todo = cache.get(keys)
            for i, row in enumerate(rows):
                if row is not None:
                    out[i] = row.to(out.device)
        if todo:
            sub_p, sub_c = [prompts[i] for i in todo], [completions[i] for i in todo]
            new = torch.zeros((len(todo), self.n_backbone_features), dtype=torch.float32, device=self.device)
            shared, rest = self._plan(sub_p, sub_c, share_prompts=share_prompts)
            for p_ids, sub, c_ids in shared:
                new[sub] = self._shared_prompt_features(p_ids, c_ids)
            for sub in rest:
                new[sub] = self._features(self._encode([sub_p[i] for i in sub], [sub_c[i] for i in sub]))
            out[todo] = new
            if cache.max_bytes:
                cache.put([keys[i] for i in todo], new)
        return self._with_program_features(out, prompts, completions)

    def _feature_parameters(self) -> list[torch.Tensor]:
        """The parameters the backbone features depend on: the decoder's own weights and this world model's
        adapter, not the other adapters of a shared peft model (the policy's, which :meth:`_decoder` disables)."""
        own = f".{self.adapter_name}."
        return [p for name, p in self._base.base_model.named_parameters()
                if "lora_" not in name or (self.lora is not None and own in name)]

    @torch.no_grad()
    def predict_outcome(self, prompts: Sequence[str], completions: Sequence[str]) -> OutcomePrediction:
        """The outcome of N trajectories: reward clipped to [0, 1], status distribution, predictive reward std.

        Completions the deterministic gate (:func:`wmrl.world_model.outcome.gate_status`) refuses get a certain
        syntax error and reward 0 without a forward pass; the others the reward head and the
        :class:`OutcomeHead` on one shared feature pass (trajectories sharing a prompt run it once, see
        :meth:`features`). Before the first :meth:`fit` the status is uniform over the three classes past the
        gate and the std 0.

        Raises:
            TypeError: ``prompts`` / ``completions`` are not sequences of strings.
            ValueError: ``prompts`` and ``completions`` differ in length.
        """
        self._check_inputs(prompts, completions)
        prompts, completions = list(prompts), list(completions)

        def model(idx: list[int]) -> OutcomePrediction:
            X = self.features([prompts[i] for i in idx], [completions[i] for i in idx])
            r = self.head(X).detach().cpu().double().numpy()
            Z = self.head.standardise(X)
            if self.neighbours is not None:
                r = r + self.neighbours.correction(Z.cpu().numpy(), [prompts[i] for i in idx],
                                                   [completions[i] for i in idx])
            r = np.clip(r, 0.0, 1.0)
            p3, std = self.outcome_head(Z)
            probs = np.zeros((len(idx), len(STATUS_CLASSES)))
            probs[:, 1:] = p3.detach().cpu().double().numpy()
            probs /= probs.sum(1, keepdims=True)
            return OutcomePrediction(r, probs, std.detach().cpu().double().numpy())

        return gated(completions, model)

    def predict(self, prompts: Sequence[str], completions: Sequence[str]) -> np.ndarray:
        """Predicted rewards for N trajectories, float64 array [N] in [0, 1]: ``predict_outcome(...).reward``.

        Raises:
            TypeError / ValueError: as :meth:`predict_outcome`.
        """
        return self.predict_outcome(prompts, completions).reward

    # ---------------------------------------------------------------- training
    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """The head's parameters, plus this world model's LoRA weights when it has an adapter."""
        params = list(self.head.linear.parameters())
        if self.lora is not None:
            adapters.activate(self.peft_model, self.adapter_name)
            params += adapters.adapter_parameters(self.peft_model, self.adapter_name)
        return params

    def _solve_head(self, train: Sequence[dict[str, Any]], rewards: np.ndarray, seed: int, *,
                    set_standardisation: bool) -> tuple[float, float]:
        """Set the head to the closed-form ridge solution on the current backbone's features, and fit the
        :class:`OutcomeHead` on the same features, and keep the rows' residuals when the world model corrects by
        residual neighbours.

        With ``set_standardisation`` the feature mean and population std (correction=0: finite even
        for one training example) are first taken from ``train``. Returns ``(ridge alpha, train MSE)``.
        """
        X = self.features([e["prompt"] for e in train], [e["completion"] for e in train])
        if set_standardisation:
            with torch.no_grad():
                self.head.mu.copy_(X.mean(0))
                self.head.sd.copy_(X.std(0, correction=0).clamp(min=1e-6))
                self.head.mu[self.n_backbone_features:] = 0.0  # program features stay 0/1 (module docstring)
                self.head.sd[self.n_backbone_features:] = 1.0
        Z = self.head.standardise(X).cpu().double().numpy()
        w, b, alpha, cv_mse = ridge_fit(Z, rewards, [e["group"] for e in train], seed=seed)
        with torch.no_grad():
            self.head.linear.weight.copy_(torch.as_tensor(w, dtype=torch.float32).view(1, -1))
            self.head.linear.bias.fill_(b)
        train_mse = float(((Z @ w + b - rewards) ** 2).mean())
        if self.neighbours is not None:
            self.neighbours.fit(Z, rewards - (Z @ w + b), [e["prompt"] for e in train],
                                [e["completion"] for e in train])
        self.outcome_head.fit(Z, [e.get("status") for e in train], alpha,
                              cv_mse if np.isfinite(cv_mse) else train_mse, seed=seed)
        return alpha, train_mse

    def fit(
        self,
        records: Sequence[dict[str, Any]],
        epochs: int = 3,
        lr: float = 3e-4,
        batch_size: int = 8,
        heldout_fraction: float = 0.2,
        seed: int = 0,
        *,
        head_lr: float = 1e-5,
        log_every: int = 0,
        time_budget_s: float | None = None,
    ) -> dict[str, Any]:
        """Fit the head (ridge, closed form) and then adapter + head (AdamW) by mean squared error.

        Step 1 computes the pooled features of the training split (no grad), sets the
        standardisation statistics on the first fit, and solves the head by ridge regression with
        the penalty chosen by group K-fold among 1, 10, 100, 1000. Step 2 (only with a LoRA adapter)
        runs ``epochs`` passes of AdamW over adapter and head, keeping the ridge penalty on ``w``
        (``head_lr`` must stay small: Adam moves each of the 2H weights by about ``head_lr`` per
        step, i.e. the prediction by about ``head_lr * 2H``); step 3 recomputes the features under the
        trained adapter and solves the head by ridge again.

        Args:
            records: execution-log rows (see the module docstring) or :class:`WorldModelExample`
                dicts (``prompt``, ``completion``, ``reward``, ``group``).
            epochs: passes over the training split in step 2 (ignored without an adapter).
            lr: AdamW learning rate of the LoRA weights; ``head_lr`` that of the head.
            batch_size: trajectories per gradient step.
            heldout_fraction: fraction of *groups* held out for the metrics (0 = none).
            seed: split, shuffling and head initialisation.
            log_every: print the running loss every this many steps (0 = silent).
            time_budget_s: stop training after this many wall seconds (the metrics are still
                computed), for CPU budgets.

        Returns:
            dict with ``n_train``, ``n_heldout``, ``skipped`` counts, ``train_seconds``,
            ``steps``, ``train_loss`` (last epoch mean MSE), ``ridge_alpha``, ``ridge_train_mse``,
            and the entries of :func:`fit_metrics` (``train`` / ``heldout`` metrics, the held-out
            ``heldout_pred`` / ``heldout_true`` lists for the calibration plot, ``predict_seconds``,
            ``predictions_per_s``).

        Raises:
            ValueError: fewer than 2 usable records, or bad hyperparameters.
        """
        check_fit_settings(epochs, lr, batch_size)
        train, held, counts = fit_split(records, heldout_fraction, seed)
        rewards = np.array([e["reward"] for e in train], dtype=np.float64)
        rng = random.Random(seed)
        t0 = time.perf_counter()
        step = 0
        last_epoch_loss = float("nan")
        stopped = False
        # 1) features of the training split under the current backbone/adapter; standardisation
        #    statistics (first fit only) and a closed-form ridge warm start of the head.
        alpha, ridge_mse = self._solve_head(train, rewards, seed, set_standardisation=not self.history)
        # 2) with an adapter: fine-tune LoRA and head jointly by MSE; the head keeps the ridge
        #    penalty (alpha / N per example, as weight decay on w in the loss).
        if self.lora is not None:
            lora_params = adapters.adapter_parameters(self.peft_model, self.adapter_name)
            opt = torch.optim.AdamW(
                [{"params": lora_params, "lr": lr}, {"params": self.head.linear.parameters(), "lr": head_lr}],
                weight_decay=0.0,
            )
            l2 = alpha / max(len(train), 1)
            for ep in range(epochs):
                order = list(range(len(train)))
                rng.shuffle(order)
                losses = []
                for s in range(0, len(order), batch_size):
                    bt = [train[i] for i in order[s:s + batch_size]]
                    pred = self.forward([e["prompt"] for e in bt], [e["completion"] for e in bt])
                    y = torch.tensor([e["reward"] for e in bt], dtype=pred.dtype, device=pred.device)
                    mse = torch.nn.functional.mse_loss(pred, y)
                    loss = mse + l2 * self.head.linear.weight.pow(2).sum()
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(lora_params + list(self.head.linear.parameters()), 1.0)
                    opt.step()
                    losses.append(float(mse.detach()))
                    step += 1
                    if log_every and step % log_every == 0:
                        print(f"  world model step {step}: mse {np.mean(losses[-log_every:]):.4f}", flush=True)
                    if time_budget_s is not None and time.perf_counter() - t0 > time_budget_s:
                        stopped = True
                        break
                last_epoch_loss = float(np.mean(losses)) if losses else float("nan")
                self.history.append({"epoch": ep, "loss": last_epoch_loss})
                if stopped:
                    break
            # 3) re-solve the head in closed form on the adapted features (same standardisation),
            #    so the final head is the ridge optimum for the final backbone.
            if step:
                alpha, ridge_mse = self._solve_head(train, rewards, seed, set_standardisation=False)
        else:
            last_epoch_loss = ridge_mse
            self.history.append({"epoch": 0, "loss": ridge_mse})
        train_seconds = time.perf_counter() - t0
        result: dict[str, Any] = {
            "n_train": len(train),
            "n_heldout": len(held),
            "skipped": counts,
            "steps": step,
            "train_seconds": train_seconds,
            "train_loss": last_epoch_loss,
            "stopped_by_time_budget": stopped,
            "ridge_alpha": alpha,
            "ridge_train_mse": ridge_mse,
        }
        result.update(fit_metrics(self, train, held))
        return result

    # ---------------------------------------------------------------- persistence
    def _head_tensors(self) -> dict[str, torch.Tensor]:
        """The reward head's tensors and the outcome head's (keys prefixed ``outcome.``), on CPU."""
        out = {k: v.detach().cpu().contiguous() for k, v in self.head.state_dict().items()}
        out.update({f"outcome.{k}": v.detach().cpu().contiguous() for k, v in self.outcome_head.state_dict().items()})
        if self.neighbours is not None:
            out.update({f"neighbours.{k}": torch.from_numpy(np.ascontiguousarray(v))
                        for k, v in self.neighbours.tensors().items()})
        return out

    def state_dict(self) -> dict[str, Any]:
        """``{"config": ..., "head": reward and outcome head tensors, "adapter": LoRA tensors (or {})}`` (on CPU)."""
        return {"config": self.config(), "head": self._head_tensors(),
                "adapter": self._adapter_state()}

    def save(self, directory: str | Path) -> Path:
        """Write ``world_model.json``, ``head.safetensors`` and the adapter (LoRA) to ``directory``."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        (d / "world_model.json").write_text(json.dumps(self.config(), indent=2))
        save_file(self._head_tensors(), str(d / "head.safetensors"))
        if self.lora is not None:
            adapters.save_adapter(self.peft_model, self.adapter_name, d, self.lora)
        return d

    def _load_into(self, directory: str | Path) -> RegressionWorldModel:
        """Instance form of :meth:`load`: ``wm.load(dir)`` loads saved weights into this world model.

        Raises:
            FileNotFoundError: nothing saved there.
            ValueError: the folder holds another kind of world model, or the saved head or adapter
                does not fit (other backbone or LoRA rank).
        """
        d = Path(directory)
        self._check_saved_kind(d)
        if not (d / "head.safetensors").is_file():
            raise FileNotFoundError(f"{d / 'head.safetensors'} is missing: save the world model there first")
        try:
            saved = {k: v.to(self.device) for k, v in load_file(str(d / "head.safetensors")).items()}
            own = {k: v for k, v in saved.items() if not k.startswith(("outcome.", "neighbours."))}
            self.head.load_state_dict(own)
            if self.neighbours is not None:
                self.neighbours.load({k[len("neighbours."):]: v.cpu().numpy() for k, v in saved.items()
                                      if k.startswith("neighbours.")})
            outcome = {k[len("outcome."):]: v for k, v in saved.items() if k.startswith("outcome.")}
            if outcome:  # folders saved before the outcome head keep it unfitted (uniform status, std 0)
                self.outcome_head.load_state_dict(outcome)
        except RuntimeError as e:
            raise ValueError(f"the world model head in {d} does not fit this backbone: {e}") from e
        if self.lora is not None:
            adapters.load_adapter(self.peft_model, self.adapter_name, d)
        return self
