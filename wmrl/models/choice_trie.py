"""Canonical constrained decoding over a finite set of sentences: a token trie.

A grammar scaffold's language is finite (a few thousand pipelines). Each sentence is tokenized once,
the way the tokenizer itself writes it (``tokenizer(text, add_special_tokens=False)``), and the
token sequences are merged into a trie whose leaves end with the stop token. At each decoding step
the allowed tokens are the children of the current node (plus the stop token where a sentence
ends), so:

* a sampled completion is always the canonical tokenization of its text: the number of sampled
  tokens equals the tokenizer's count for the same text (a subword grammar matcher such as xgrammar
  accepts every spelling, "m"+"ake"+..., which the project measured at 49.7 tokens per completion
  against 30.0 canonical ones);
* a node with one child is forced: under the masked distribution its log-probability is exactly 0,
  and the policy marks it as no choice (:attr:`wmrl.models.types.RolloutBatch.choice_mask`), so the
  loss and the KL see only the tokens where the policy really chose.

Building the trie for 3,000 sentences takes about 0.1 s; it is cached per scaffold and key.

A grammar with dense numeric slots (a :class:`wmrl.models.grammar_lang.Language`: millions of sentences) is
compiled from its skeletons instead (:meth:`ChoiceTrie.from_grammar`): the tokenizer writes digits as tokens
of their own, so each numeric slot becomes a small trie of its values' digits, shared by every continuation,
and the trie is a directed acyclic graph with far fewer nodes than sentences.

For decoding loops, :meth:`ChoiceTrie.tables` gives the trie as tensors (:class:`TrieTables`): the
masks, transitions and forced-token runs of a whole batch are then computed with a few tensor ops and
no per-row Python (:class:`TrieMatcher` and :func:`allowed_mask`, one row at a time, remain
for the ``generate`` engine that is kept as the measured baseline).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from wmrl.models.grammar_lang import GrammarNode, Language, Number, count, skeletons


class ChoiceTrie:
    """A trie of canonical token sequences, each ending with ``stop_token_id``.

    Args:
        sequences: the token ids of each sentence (without the stop token); at least one.
        stop_token_id: the token that ends every sentence (the tokenizer's EOS).

    Raises:
        ValueError: no sequences, an empty sequence, or a sequence containing the stop token.
    """

    def __init__(self, sequences: Sequence[Sequence[int]], stop_token_id: int):
        if not sequences:
            raise ValueError("a choice trie needs at least one sentence")
        self.stop_token_id = int(stop_token_id)
        self.children: list[dict[int, int]] = [{}]
        self.terminal: list[bool] = [False]
        self.max_length = 0  # tokens of the longest sentence, stop token included
        for seq in sequences:
            if not seq:
                raise ValueError("a sentence of the grammar tokenizes to no tokens")
            if self.stop_token_id in seq:
                raise ValueError(f"a sentence contains the stop token {self.stop_token_id}")
            node = 0
            for tok in seq:
                nxt = self.children[node].get(int(tok))
                if nxt is None:
                    nxt = len(self.children)
                    self.children[node][int(tok)] = nxt
                    self.children.append({})
                    self.terminal.append(False)
                node = nxt
            self.terminal[node] = True
            self.max_length = max(self.max_length, len(seq) + 1)
        self._allowed: dict[int, torch.Tensor] = {}

    @classmethod
    def from_sentences(cls, tokenizer: Any, sentences: Sequence[str], stop_token_id: int) -> ChoiceTrie:
        """The trie of each sentence's canonical tokenization by ``tokenizer`` (no special tokens).

        A :class:`~wmrl.models.grammar_lang.Language` is compiled from its grammar (:meth:`from_grammar`)
        without listing its sentences.
        """
        if isinstance(sentences, Language):
            return cls.from_grammar(tokenizer, sentences.grammar, stop_token_id)
        ids = tokenizer(list(sentences), add_special_tokens=False)["input_ids"]
        return cls(ids, stop_token_id)

    @classmethod
    def from_grammar(cls, tokenizer: Any, grammar: GrammarNode, stop_token_id: int) -> ChoiceTrie:
        """The choice graph of a grammar with :class:`~wmrl.models.grammar_lang.Number` slots, built from its
        skeletons (:func:`~wmrl.models.grammar_lang.skeletons`) without listing its sentences.

        Each skeleton's texts are tokenized alone and each slot becomes the trie of its values' tokens,
        joined to every continuation; the paths of the graph are then the canonical tokenizations of the
        sentences, provided the tokenizer never merges a token across a slot's edge. That is checked on each
        slot's edges: every value of each slot, between each pair of texts the slot stands between in some
        skeleton (the other slots at their first value), and every skeleton once with all its slots at their
        last value, is tokenized whole and compared with the graph's path.
        A tokenizer that writes digits as tokens of their own (SmolLM2's, Llama 3's, Qwen's) passes. A grammar
        that produces a sentence twice (two derivations) is refused: the graph would hold fewer sentences than
        the grammar counts, and uniform draws over derivations would not be uniform over programs.

        Nodes are numbered so that every child's id is larger than its parent's (as in a trie), which
        :class:`TrieTables` relies on; :attr:`terminal` marks where a sentence may end.

        Args:
            tokenizer: a Hugging Face tokenizer (called with ``add_special_tokens=False``).
            grammar: the grammar node.
            stop_token_id: the token that ends every sentence.

        Raises:
            ValueError: the grammar has no sentence or the empty sentence, the tokenizer merges tokens across a
                slot's edge (the message names a sentence), two slots meet with no text between them, a slot's
                values begin with a token that the text beside it may also begin with, a sentence is produced
                twice, or the stop token occurs in a sentence.
        """
        sks = list(dict.fromkeys(skeletons(grammar)))
        if not sks:
            raise ValueError("a choice trie needs at least one sentence; the grammar has none (an empty choice)")
        if () in sks:
            raise ValueError("the grammar has the empty sentence, which tokenizes to no tokens")
        slots = list(dict.fromkeys(p for sk in sks for p in sk if isinstance(p, Number)))
        texts = list(dict.fromkeys(p for sk in sks for p in sk if isinstance(p, str)))

        def tok(xs: Sequence[str]) -> list[list[int]]:
            if not xs:
                return []
            return [list(map(int, ids)) for ids in tokenizer(list(xs), add_special_tokens=False)["input_ids"]]

        text_ids = dict(zip(texts, tok(texts), strict=True))
        value_ids = {n: tok(n.values) for n in slots}
        _check_slot_edges(tok, sks, text_ids, value_ids)
        children: list[dict[int, int]] = [{}]
        terminal = [False]
        slot_key = {n: -1 - i for i, n in enumerate(slots)}  # a slot is a pseudo token until expanded

        def child(node: int, key: int) -> int:
            nxt = children[node].get(key)
            if nxt is None:
                nxt = len(children)
                children[node][key] = nxt
                children.append({})
                terminal.append(False)
            return nxt

        for sk in sks:
            node = 0
            for part in sk:
                for key in (text_ids[part] if isinstance(part, str) else [slot_key[part]]):
                    if key == stop_token_id:
                        raise ValueError(f"a sentence contains the stop token {stop_token_id}")
                    node = child(node, key)
            terminal[node] = True
        for node in range(len(children)):  # expand each slot edge into its values' tokens (new nodes come last)
            for key, after in [(k, c) for k, c in children[node].items() if k < 0]:
                del children[node][key]
                slot = slots[-1 - key]
                if any(k < 0 for k in children[after]):
                    raise ValueError("two numeric slots meet with no text between them; put literal text between")
                clash = set(children[node]) & {ids[0] for ids in value_ids[slot]}
                if clash:
                    raise ValueError(f"a numeric slot's values begin with a token that another choice at the same "
                                     f"place also begins with ({tokenizer.decode(sorted(clash)[:1])!r}); make the "
                                     "choices start differently or merge them into one slot")
                ends = set()
                for ids in value_ids[slot]:
                    cur = node
                    for t in ids:
                        cur = child(cur, t)
                    ends.add(cur)
                for end in ends:
                    clash = set(children[end]) & set(children[after])
                    if clash:
                        raise ValueError(f"a numeric slot's value may go on with a token that also begins the text "
                                         f"after the slot ({tokenizer.decode(sorted(clash)[:1])!r})")
                    children[end].update(children[after])
                    terminal[end] = terminal[end] or terminal[after]
        trie = cls._from_graph(children, terminal, stop_token_id)
        n_paths = trie.n_sentences()
        if n_paths != count(grammar):
            raise ValueError(f"the grammar produces some sentence more than once ({count(grammar)} derivations, "
                             f"{n_paths} distinct sentences); rewrite it so that each sentence has one derivation")
        return trie

    def n_sentences(self) -> int:
        """The number of sentences: paths from the root to a node where a sentence may end (counted, not listed)."""
        paths = [0] * len(self.children)
        for n in range(len(self.children) - 1, -1, -1):
            paths[n] = int(self.terminal[n]) + sum(paths[c] for c in self.children[n].values())
        return paths[0]

    @classmethod
    def _from_graph(cls, children: list[dict[int, int]], terminal: list[bool], stop_token_id: int) -> ChoiceTrie:
        """A trie over the nodes reachable from node 0 of an acyclic graph, renumbered in topological order."""
        order: list[int] = []
        state: dict[int, bool] = {}  # False while on the stack, True once finished
        stack: list[tuple[int, bool]] = [(0, False)]
        while stack:
            node, done = stack.pop()
            if done:
                state[node] = True
                order.append(node)
                continue
            if node in state:
                continue
            state[node] = False
            stack.append((node, True))
            stack.extend((c, False) for c in children[node].values() if c not in state)
        order.reverse()  # parents before children
        new = {old: i for i, old in enumerate(order)}
        self = cls.__new__(cls)
        self.stop_token_id = int(stop_token_id)
        self.children = [{t: new[c] for t, c in children[old].items()} for old in order]
        self.terminal = [terminal[old] for old in order]
        longest = [0] * len(order)  # tokens after the node, stop token included
        for n in range(len(order) - 1, -1, -1):
            longest[n] = 1 if self.terminal[n] else 0
            for c in self.children[n].values():
                longest[n] = max(longest[n], 1 + longest[c])
        self.max_length = longest[0]
        self._allowed = {}
        return self

    def __len__(self) -> int:
        return len(self.children)

    def allowed(self, node: int) -> torch.Tensor:
        """[K] int64: the tokens allowed after ``node`` (its children, and the stop token if a
        sentence ends there), in increasing order. Cached per node."""
        t = self._allowed.get(node)
        if t is None:
            toks = list(self.children[node]) + ([self.stop_token_id] if self.terminal[node] else [])
            t = torch.tensor(sorted(toks), dtype=torch.long)
            self._allowed[node] = t
        return t

    def matcher(self) -> TrieMatcher:
        """A fresh matcher at the root."""
        return TrieMatcher(self)

    def tables(self) -> TrieTables:
        """The trie as tensors for batched decoding (built once, cached)."""
        t = getattr(self, "_tables", None)
        if t is None:
            t = TrieTables.build([self])
            self._tables = t
        return t


#: node id of a row that has accepted its stop token (no more tokens allowed)
DONE = -1


class TrieTables:
    """One or more :class:`ChoiceTrie` as flat tensors, for batched masks and transitions.

    Nodes of the tries are numbered globally (trie ``k``'s node ``n`` is ``roots[k] + n``). All
    tensors are int64 / bool on the CPU:

    * ``offsets`` [N+1], ``tokens`` [E]: the allowed tokens of node ``n`` (children, and the stop
      token where a sentence ends) are ``tokens[offsets[n]:offsets[n+1]]``; ``n_allowed`` [N].
    * ``edge_keys`` [E'] (sorted ``node * key_base + token``) and ``edge_next`` [E']: the child
      reached by a token, found with ``searchsorted``; ``terminal`` [N] bool; ``stop`` [N] int64
      (the stop token of the node's trie).
    * forced runs: from node ``n`` the grammar may force a run of tokens (nodes with exactly one
      allowed token); ``run_offsets`` [N+1], ``run_tokens`` [F] list them and ``run_end`` [N] is the
      node after the run (:data:`DONE` when the run ends with the stop token). Decoding appends a
      whole run after each sampled token (each forced token has log-prob exactly 0).
    """

    roots: torch.Tensor
    offsets: torch.Tensor
    tokens: torch.Tensor
    n_allowed: torch.Tensor
    terminal: torch.Tensor
    stop: torch.Tensor
    key_base: torch.Tensor
    edge_keys: torch.Tensor
    edge_next: torch.Tensor
    run_offsets: torch.Tensor
    run_tokens: torch.Tensor
    run_end: torch.Tensor

    def __init__(self, **t: torch.Tensor):
        """The tensors above, by name (:meth:`build` makes them)."""
        self.__dict__.update(t)
        self.n_nodes = int(self.n_allowed.numel())

    @classmethod
    def build(cls, tries: Sequence[ChoiceTrie]) -> TrieTables:
        """Tables of ``tries`` with global node numbering (see :attr:`roots`)."""
        roots: list[int] = []
        allowed: list[list[int]] = []
        terminal: list[bool] = []
        stops: list[int] = []
        edges: list[tuple[int, int, int]] = []
        base = 0
        for tr in tries:
            roots.append(base)
            for n, ch in enumerate(tr.children):
                toks = sorted(list(ch) + ([tr.stop_token_id] if tr.terminal[n] else []))
                allowed.append(toks)
                terminal.append(tr.terminal[n])
                stops.append(tr.stop_token_id)
                edges.extend((base + n, tok, base + c) for tok, c in ch.items())
            base += len(tr.children)
        N = base
        counts = [len(a) for a in allowed]
        offsets = [0]
        for c in counts:
            offsets.append(offsets[-1] + c)
        key_base = 1 + max(max(max(a) for a in allowed if a), max(stops))
        edges.sort(key=lambda e: e[0] * key_base + e[1])
        # forced runs, children first (a child's id is always larger than its parent's)
        run: list[list[int]] = [[] for _ in range(N)]
        end = list(range(N))
        child = {(a, tok): c for a, tok, c in edges}
        for n in range(N - 1, -1, -1):
            if counts[n] != 1:
                continue
            tok = allowed[n][0]
            if terminal[n] and tok == stops[n]:
                run[n], end[n] = [tok], DONE
            else:
                c = child[(n, tok)]
                run[n], end[n] = [tok] + run[c], end[c]
        run_offsets = [0]
        for r in run:
            run_offsets.append(run_offsets[-1] + len(r))
        L = torch.long
        return cls(
            roots=torch.tensor(roots, dtype=L), offsets=torch.tensor(offsets, dtype=L),
            tokens=torch.tensor([t for a in allowed for t in a], dtype=L), n_allowed=torch.tensor(counts, dtype=L),
            terminal=torch.tensor(terminal, dtype=torch.bool), stop=torch.tensor(stops, dtype=L),
            key_base=torch.tensor(key_base, dtype=L),
            edge_keys=torch.tensor([a * key_base + tok for a, tok, _ in edges], dtype=L),
            edge_next=torch.tensor([c for _, _, c in edges], dtype=L),
            run_offsets=torch.tensor(run_offsets, dtype=L),
            run_tokens=torch.tensor([t for r in run for t in r], dtype=L),
            run_end=torch.tensor(end, dtype=L),
        )

    def mask(self, nodes: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """[B, V] bool: True at the tokens allowed after each of ``nodes`` ([B] int64, all >= 0)."""
        counts = self.n_allowed[nodes]
        rows = torch.repeat_interleave(torch.arange(nodes.numel()), counts)
        flat = ragged_index(self.offsets[nodes], counts)
        out = torch.zeros((nodes.numel(), vocab_size), dtype=torch.bool)
        out[rows, self.tokens[flat]] = True
        return out

    def step(self, nodes: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """[B] int64: the node after ``tokens`` ([B]) from ``nodes`` ([B], >= 0); :data:`DONE` after
        the stop token at a sentence's end; -2 where the token is not allowed."""
        keys = nodes * self.key_base + tokens
        nxt = torch.full_like(nodes, -2)
        E = self.edge_keys.numel()
        if E:
            pos = torch.searchsorted(self.edge_keys, keys).clamp(max=E - 1)
            nxt = torch.where(self.edge_keys[pos] == keys, self.edge_next[pos], nxt)
        done = self.terminal[nodes] & (tokens == self.stop[nodes])
        return torch.where(done, torch.full_like(nodes, DONE), nxt)

    def replay(self, starts: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """[B, L] int64 node before each token of ``tokens`` ([B, L], the first ``lengths[b]`` real)
        walked from ``starts`` ([B]); :data:`DONE` after a stop token, -2 after a token the grammar
        does not allow (and from there on). Loops over the L columns, not the rows."""
        B, L = tokens.shape
        nodes = torch.empty((B, L), dtype=torch.long)
        cur = starts.clone()
        for t in range(L):
            nodes[:, t] = cur
            live = (cur >= 0) & (t < lengths)
            if live.any():
                cur = torch.where(live, self.step(cur.clamp(min=0), tokens[:, t]), cur)
        return nodes


def _check_slot_edges(tok: Any, sks: Sequence[tuple], text_ids: dict[str, list[int]],
                      value_ids: dict[Number, list[list[int]]]) -> None:
    """Raise ValueError unless whole sentences tokenize as their pieces do (see :meth:`ChoiceTrie.from_grammar`):
    every value of each slot between each pair of texts the slot stands between (the skeleton's other slots at
    their first value), and each skeleton once with every slot at its last value."""
    fills: list[tuple[tuple, dict[int, int]]] = []
    seen: set[tuple] = set()
    for sk in sks:
        where = [i for i, part in enumerate(sk) if isinstance(part, Number)]
        if not where:
            continue
        fills.append((sk, {i: len(sk[i].values) - 1 for i in where}))
        for i in where:
            edge = (sk[i - 1] if i else "", sk[i], sk[i + 1] if i + 1 < len(sk) else "")
            if edge not in seen:
                seen.add(edge)
                fills.extend((sk, {**{j: 0 for j in where}, i: v}) for v in range(len(sk[i].values)))
    for start in range(0, len(fills), 4096):
        chunk = fills[start:start + 4096]
        texts = ["".join(part if isinstance(part, str) else part.values[f[i]] for i, part in enumerate(sk))
                 for sk, f in chunk]
        for text, got, (sk, f) in zip(texts, tok(texts), chunk, strict=True):
            want = [t for i, part in enumerate(sk)
                    for t in (text_ids[part] if isinstance(part, str) else value_ids[part][f[i]])]
            if got != want:
                raise ValueError(f"the tokenizer merges tokens across a numeric slot's edge in {text!r}: a grammar "
                                 "with Number slots needs a tokenizer that writes digits as tokens of their own, "
                                 "or literal text around each slot that the tokenizer splits from the digits")


def ragged_index(starts: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """The concatenation of ``arange(starts[i], starts[i] + counts[i])`` over i ([sum(counts)] int64)."""
    total = int(counts.sum())
    first = torch.repeat_interleave(starts - (torch.cumsum(counts, 0) - counts), counts)
    return first + torch.arange(total)


class TrieMatcher:
    """Walks one row's sampled tokens down a :class:`ChoiceTrie`.

    ``is_terminated()`` turns True once the stop token was accepted at the end of a sentence.
    """

    def __init__(self, trie: ChoiceTrie):
        self.trie = trie
        self.node = 0
        self._terminated = False

    def is_terminated(self) -> bool:
        """Whether a whole sentence and its stop token were accepted."""
        return self._terminated

    def allowed(self) -> torch.Tensor:
        """[K] int64 tokens allowed next (see :meth:`ChoiceTrie.allowed`); empty once terminated."""
        if self._terminated:
            return torch.empty(0, dtype=torch.long)
        return self.trie.allowed(self.node)

    def accept_token(self, token: int) -> bool:
        """Advance by ``token``; False (and no move) when it is not allowed here."""
        if self._terminated:
            return False
        token = int(token)
        if token == self.trie.stop_token_id and self.trie.terminal[self.node]:
            self._terminated = True
            return True
        nxt = self.trie.children[self.node].get(token)
        if nxt is None:
            return False
        self.node = nxt
        return True


def allowed_mask(matchers: Sequence[TrieMatcher | None], vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The next-token masks of a batch of matchers.

    Args:
        matchers: B matchers; None (or a terminated matcher) leaves its row unconstrained.
        vocab_size: V, the width of the mask.

    Returns:
        ``(allowed, n_allowed)``: [B, V] bool, True where a token may be sampled, and [B] int64, the
        number of allowed tokens of each row (V for unconstrained rows).
    """
    B = len(matchers)
    allowed = torch.zeros((B, vocab_size), dtype=torch.bool)
    n = torch.full((B,), vocab_size, dtype=torch.long)
    for i, m in enumerate(matchers):
        if m is None or m.is_terminated():
            allowed[i] = True
            continue
        toks = m.allowed()
        allowed[i, toks] = True
        n[i] = toks.numel()
    return allowed, n
