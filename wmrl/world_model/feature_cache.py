"""A cache of a frozen backbone's pooled features, keyed by trajectory text and the weights that computed them.

A world model whose backbone is frozen (no adapter of its own: ``world_model.adapter: false``) computes the same
features for the same (prompt, completion) at every call. A run that refits its head every step
(``world_model.refresh_every_k: 1``) recomputes the features of the whole warm-up corpus and of every anchor so
far each time; with SmolLM2-135M on two CPU cores that refit took longer than the rest of the step together.
:class:`FeatureCache` keeps each trajectory's feature row so that only new trajectories run through the backbone.

Entries are valid only for the weights that computed them: every lookup compares a fingerprint of the decoder's
parameters (:func:`weights_fingerprint`: each parameter's identity, in-place version counter, shape and the sum of
a strided sample of its values) with the one the entries were computed under, and empties the cache when it
differs (a trained adapter, a loaded checkpoint, weights edited through ``.data``). The bound is in bytes; the
least recently used rows go first.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

import torch

#: Default bound of a world model's feature cache, bytes (about 58,000 rows of SmolLM2-135M's 2 x 576 float32
#: features).
DEFAULT_MAX_BYTES = 256 * 2**20
#: Every how many-th value of a parameter the fingerprint sums (a training update moves all of them).
_STRIDE = 997


def trajectory_key(prompt: str, completion: str) -> bytes:
    """The cache key of one trajectory: SHA-256 of its prompt and completion (UTF-8, a lone surrogate as its code
    point), length-prefixed so that no two (prompt, completion) pairs share a key."""
    h = hashlib.sha256()
    for part in (prompt, completion):
        b = part.encode("utf-8", errors="surrogatepass")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.digest()


@torch.no_grad()
def weights_fingerprint(parameters: Iterable[torch.Tensor]) -> tuple[Any, ...]:
    """A value that changes when any of ``parameters`` changes: per parameter its ``id``, its in-place version
    counter (``Tensor._version``, bumped by optimiser steps and ``copy_``), its shape and the float64 sum of every
    997th value (which catches writes through ``.data``, which bypass the version counter). Costs a few
    milliseconds for a 135M-parameter model."""
    out: list[Any] = []
    for p in parameters:
        flat = p.detach().reshape(-1)
        out.append((id(p), p._version, tuple(p.shape), float(flat[::_STRIDE].double().sum())))
    return tuple(out)


class FeatureCache:
    """Feature rows ([D] float32, on the CPU) of trajectories by :func:`trajectory_key`, valid for one weights
    fingerprint, bounded to ``max_bytes`` (least recently used rows evicted first).

    Raises:
        ValueError: ``max_bytes`` is negative (0 keeps nothing: the cache is off).
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES):
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0 (0 = off), got {max_bytes}")
        self.max_bytes = int(max_bytes)
        self._rows: OrderedDict[bytes, torch.Tensor] = OrderedDict()
        self._bytes = 0
        self._fingerprint: tuple[Any, ...] | None = None
        #: lookups answered from the cache / computed, since the cache was made (for a throughput report)
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._rows)

    def validate(self, fingerprint: tuple[Any, ...]) -> None:
        """Empty the cache unless its rows were computed under ``fingerprint`` (:func:`weights_fingerprint`)."""
        if fingerprint != self._fingerprint:
            self.clear()
            self._fingerprint = fingerprint

    def clear(self) -> None:
        """Forget every row."""
        self._rows.clear()
        self._bytes = 0

    def get(self, keys: Sequence[bytes]) -> tuple[list[torch.Tensor | None], list[int]]:
        """The cached row of each key (None where there is none) and the indices of the missing ones."""
        rows: list[torch.Tensor | None] = []
        missing: list[int] = []
        for i, k in enumerate(keys):
            row = self._rows.get(k)
            if row is None:
                missing.append(i)
            else:
                self._rows.move_to_end(k)
            rows.append(row)
        self.hits += len(keys) - len(missing)
        self.misses += len(missing)
        return rows, missing

    def put(self, keys: Sequence[bytes], rows: torch.Tensor) -> None:
        """Store ``rows`` ([N, D]) under ``keys`` (N of them), evicting the least recently used rows past the
        bound."""
        if self.max_bytes == 0:
            return
        rows = rows.detach().to("cpu", torch.float32)
        for k, row in zip(keys, rows, strict=True):
            old = self._rows.pop(k, None)
            if old is not None:
                self._bytes -= old.numel() * 4
            r = row.clone()
            self._rows[k] = r
            self._bytes += r.numel() * 4
        while self._bytes > self.max_bytes and self._rows:
            _, r = self._rows.popitem(last=False)
            self._bytes -= r.numel() * 4
