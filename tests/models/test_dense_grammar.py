"""Dense numeric slots: the grammar language's :class:`Number`, :class:`Language` (counted, indexed and matched
without listing), the choice graph compiled from skeletons (the same canonical paths as the sentence trie), its
refusals, and the ``grammar-dense`` scaffold built on them."""
from __future__ import annotations

import collections
import random
import re

import pytest

from wmrl.models.choice_trie import ChoiceTrie, TrieTables
from wmrl.models.dense_grammar import decimals, dense_grammar_language, integers, two_digits
from wmrl.models.grammar_lang import Language, Number, count, expand, pattern, sentence_at, skeletons
from wmrl.models.scaffolds import get_scaffold, grammar_sentences

#: A small grammar with every kind of node: an optional slot, a slot beside a literal alternative, decimals.
SMALL = ("f(", ["", ("a=", integers(1, 30), ", ")], "b=", [Number(("0.5", "1.25", "10")), "None"], ", c=",
         ["'x'", decimals(1, 12, 2)], ")")


def _paths(trie: ChoiceTrie) -> list[tuple[int, ...]]:
    """Every token path of a trie or choice graph from the root to a node where a sentence may end."""
    out, stack = [], [(0, ())]
    while stack:
        node, pre = stack.pop()
        if trie.terminal[node]:
            out.append(pre)
        stack.extend((c, (*pre, t)) for t, c in trie.children[node].items())
    return sorted(out)


def test_number_slots_refuse_what_they_cannot_decode():
    with pytest.raises(ValueError, match="at least one"):
        Number(())
    with pytest.raises(ValueError, match="distinct"):
        Number(("1", "1"))
    for bad in (("1e-09",), ("01",), ("1.",), (".5",), ("-1",), ("",), (" 1",)):
        with pytest.raises(ValueError, match="decimal numbers"):
            Number(bad)
    for bad in ("123", (1, 2)):
        with pytest.raises(TypeError, match="sequence of strings"):
            Number(bad)
    assert Number(["1", "2"]) == Number(("1", "2"))  # a list is kept as a tuple: slots are hashable
    assert integers(3, 5).values == ("3", "4", "5")
    assert decimals(5, 7, 3).values == ("0.005", "0.006", "0.007")
    assert two_digits(-1, 0).values[:2] == ("0.10", "0.11") and two_digits(-1, 0).values[-1] == "9.9"
    assert len(two_digits(-3, 2).values) == 540 and len(set(map(float, two_digits(-3, 2).values))) == 540


def test_language_counts_indexes_and_matches_without_listing():
    sentences = expand(SMALL)
    lang = Language(SMALL)
    assert len(lang) == count(SMALL) == len(sentences) == len(set(sentences)) == 31 * 4 * 13
    assert list(lang) == sentences and [lang[i] for i in (0, 17, -1)] == [sentences[0], sentences[17], sentences[-1]]
    assert lang[3:6] == sentences[3:6] and lang[::-97] == sentences[::-97]
    with pytest.raises(TypeError, match="indexed by an int"):
        lang["1"]
    with pytest.raises(TypeError, match="membership"):
        lang.index(sentences[5])
    assert lang.count(sentences[5]) == 1 and lang.count("f()") == 0
    assert "" not in Language([]) and "x" not in Language(("x", [])) and len(Language(("x", []))) == 0
    assert all(s in lang for s in sentences)
    for s in ("f(a=31, b=None, c='x')", "f(a=0, b=None, c='x')", "f(b=0.50, c='x')", "f(b=None, c=0.1)",
              "f(b=None, c='x'))", "f(a=3, b=None, c='x')"):
        assert (s in lang) == (s in sentences), s
    assert "f(a=3, b=None, c='x')" in lang
    assert "f(a=3, b=None, c=0.13)" not in lang and "f(a=3, b=None, c=0.1)" not in lang
    assert re.fullmatch(pattern(SMALL), "f(a=30, b=1.25, c=0.12)")
    with pytest.raises(IndexError):
        sentence_at(SMALL, len(sentences))
    # uniform draws of the standard library work on it, as on a tuple of its sentences
    assert random.Random(3).choices(lang, k=5) == random.Random(3).choices(sentences, k=5)
    sks = skeletons(SMALL)
    assert len(sks) == 2 * 2 * 2 and all(isinstance(p, str | Number) for sk in sks for p in sk)
    assert ("f(a=", integers(1, 30), ", b=", Number(("0.5", "1.25", "10")), ", c='x')") in sks


def test_choice_graph_has_the_paths_of_the_sentence_trie(tiny):
    """Compiled from skeletons, the graph has exactly the canonical tokenizations of the sentences (every path,
    compared with the trie of all sentences), with fewer nodes, children numbered after their parents, and the
    same longest sentence; its tables decode as a trie's."""
    _, tok = tiny
    stop = tok.eos_token_id
    graph = ChoiceTrie.from_sentences(tok, Language(SMALL), stop)
    trie = ChoiceTrie.from_sentences(tok, expand(SMALL), stop)
    assert _paths(graph) == _paths(trie) and len(_paths(graph)) == len(expand(SMALL))
    assert len(graph) < len(trie) / 4 and graph.max_length == trie.max_length
    assert all(c > n for n, ch in enumerate(graph.children) for c in ch.values())
    tables = TrieTables.build([graph])
    for s in random.Random(0).sample(expand(SMALL), 40):
        ids = tok(s, add_special_tokens=False)["input_ids"] + [stop]
        m, node = graph.matcher(), tables.roots[:1]
        for t in ids:
            assert m.accept_token(t), s
            node = tables.step(node, node.new_tensor([t]))
        assert m.is_terminated() and int(node[0]) == -1, s


class _MergingTokenizer:
    """Characters as tokens, except that ``"=1"`` is one token: it merges across a slot's edge."""

    def __call__(self, texts, add_special_tokens=False):
        def one(text):
            out, i = [], 0
            while i < len(text):
                if text.startswith("=1", i):
                    out.append(1000)
                    i += 2
                else:
                    out.append(ord(text[i]))
                    i += 1
            return out

        return {"input_ids": [one(t) for t in texts]}

    def decode(self, ids):
        return "".join("=1" if t == 1000 else chr(t) for t in ids)


def test_choice_graph_refuses_grammars_it_cannot_decode_canonically():
    tok = _MergingTokenizer()
    with pytest.raises(ValueError, match="merges tokens across a numeric slot"):
        ChoiceTrie.from_grammar(tok, ("a=", integers(1, 3)), 0)
    assert _paths(ChoiceTrie.from_grammar(tok, ("a:", integers(1, 3)), 0)) == [(97, 58, 49), (97, 58, 50),
                                                                              (97, 58, 51)]
    with pytest.raises(ValueError, match="no text between"):
        ChoiceTrie.from_grammar(tok, ("a:", integers(1, 3), integers(1, 3)), 0)
    with pytest.raises(ValueError, match="also begins with"):
        ChoiceTrie.from_grammar(tok, ("a:", [integers(1, 3), "1x"]), 0)
    with pytest.raises(ValueError, match="text after the slot"):
        ChoiceTrie.from_grammar(tok, ("a:", integers(1, 15), ["", "5"]), 0)
    with pytest.raises(ValueError, match="stop token"):
        ChoiceTrie.from_grammar(tok, ("a:", integers(1, 3), ";"), ord(";"))
    with pytest.raises(ValueError, match="at least one sentence"):
        ChoiceTrie.from_grammar(tok, ("x=", [], ")"), 0)
    with pytest.raises(ValueError, match="empty sentence"):
        ChoiceTrie.from_grammar(tok, ["", ("a:", integers(1, 3))], 0)
    with pytest.raises(ValueError, match="more than once"):
        ChoiceTrie.from_grammar(tok, ["ab", ("a", "b")], 0)
    with pytest.raises(ValueError, match="more than once"):
        ChoiceTrie.from_grammar(tok, ("a:", [integers(1, 3), integers(1, 3)], ";"), 0)
    # a merge on one edge that a sample of fills would miss: every value is checked between every pair of texts
    with pytest.raises(ValueError, match="merges tokens"):
        ChoiceTrie.from_grammar(tok, [("a:", integers(0, 9)), ("b=", integers(0, 9))], 0)
    assert ChoiceTrie.from_grammar(tok, integers(1, 12), 0).n_sentences() == 12  # a slot alone is a grammar


_FAMILY = re.compile(r"(\w+)\([^()]*\)\)$")  # the last call of the pipeline: the model


def test_dense_grammar_is_the_documented_language():
    for kind, n in (("classifier", 164_149_654), ("regressor", 164_157_168)):
        lang = dense_grammar_language(kind)
        assert len(lang) == n
        drawn = random.Random(kind).choices(lang, k=2000)
        assert all(s.startswith("make_pipeline(") and s.endswith(")") and s in lang for s in drawn)
        # the grammar scaffold's preprocessing and model families, per kind (one sentence of each skeleton)
        firsts = ["".join(p if isinstance(p, str) else p.values[0] for p in sk) for sk in skeletons(lang.grammar)]
        assert all(s in lang for s in firsts)
        assert {_FAMILY.search(s).group(1) for s in firsts} == {_FAMILY.search(s).group(1)
                                                                for s in grammar_sentences(kind)}
        assert {s[:s.rindex(_FAMILY.search(s).group(1))] for s in firsts} == \
            {s[:s.rindex(_FAMILY.search(s).group(1))] for s in grammar_sentences(kind)}
        for s in drawn[:200]:
            compile(s, "<sentence>", "eval")
    clf = dense_grammar_language("classifier")
    for s in ("make_pipeline(RandomForestClassifier(n_estimators=137, max_depth=None, min_samples_leaf=30))",
              "make_pipeline(StandardScaler(), LogisticRegression(C=0.0047, max_iter=1000))",
              "make_pipeline(HistGradientBoostingClassifier(max_iter=10, learning_rate=0.005, max_leaf_nodes=99))"):
        assert s in clf
    for s in ("make_pipeline(RandomForestClassifier(n_estimators=301, max_depth=None, min_samples_leaf=30))",
              "make_pipeline(RandomForestClassifier(n_estimators=137, max_depth=1, min_samples_leaf=3))",
              "make_pipeline(LogisticRegression(C=0.00470, max_iter=1000))"):
        assert s not in clf
    with pytest.raises(KeyError):
        dense_grammar_language("ranker")


def test_how_often_samples_of_one_family_repeat():
    """A policy settled on one model family but still spread over its programs (any preprocessing, draws uniform
    within the family): 16 samples a step for 40 steps repeat an earlier program in none of the four ensemble
    families, 1-5 % of the time for the tree and linear families, under 10 % for KNN and most of the time for
    GaussianNB (the bands docs/models.md states)."""
    from wmrl.models.dense_grammar import _MODELS
    from wmrl.models.grammar_lang import PREPROCESSING

    def repeat_rate(model) -> float:
        family = Language(("make_pipeline(", PREPROCESSING, model, ")"))
        rates = []
        for seed in range(5):
            seen, hits = set(), 0
            for s in random.Random(seed).choices(family, k=40 * 16):
                hits += s in seen
                seen.add(s)
            rates.append(hits / (40 * 16))
        return sum(rates) / len(rates)

    for kind in ("classifier", "regressor"):
        rates = {re.match(r"\w+", Language(m)[0]).group(0): repeat_rate(m) for m in _MODELS[kind]}
        for name, rate in rates.items():
            if name.startswith(("RandomForest", "ExtraTrees", "HistGradientBoosting", "GradientBoosting")):
                assert rate == 0.0, (name, rate)
            elif name.startswith(("DecisionTree", "LogisticRegression", "Ridge", "Lasso")):
                assert 0.01 <= rate <= 0.05, (name, rate)
            elif name.startswith("KNeighbors"):
                assert 0.05 <= rate < 0.10, (name, rate)
            else:
                assert name == "GaussianNB" and rate > 0.5, (name, rate)


def test_dense_grammar_decodes_canonically_within_the_budget(tiny):
    """Sampled sentences' canonical tokenizations are paths of the compiled graph ending with the stop token, and
    the longest sentence fits the scaffold's, the trainer's and the bench preset's token budgets."""
    from wmrl.bench.presets import load_preset
    from wmrl.training.config import TrainConfig

    _, tok = tiny
    stop = tok.eos_token_id
    sc = get_scaffold("grammar-dense")
    longest = 0
    for kind in ("classifier", "regressor"):
        lang = sc.grammar_sentences(kind)
        graph = ChoiceTrie.from_sentences(tok, lang, stop)
        longest = max(longest, graph.max_length)
        drawn = random.Random(kind).choices(lang, k=300)
        for s, ids in zip(drawn, tok(drawn, add_special_tokens=False)["input_ids"], strict=True):
            m = graph.matcher()
            assert all(m.accept_token(t) for t in ids) and m.accept_token(stop) and m.is_terminated(), s
    assert longest == 65
    preset = load_preset("cpu-small-dense")
    assert longest <= min(sc.default_max_new_tokens, TrainConfig().rollout.max_new_tokens,
                          preset.config["rollout"]["max_new_tokens"])


def test_dense_scaffold_accepts_only_its_own_kind(tasks):
    sc = get_scaffold("grammar-dense")
    clf = "make_pipeline(MinMaxScaler(), RandomForestClassifier(n_estimators=77, max_depth=13, min_samples_leaf=3))"
    assert sc.is_valid(tasks[0], clf) and not sc.is_valid(tasks[1], clf)
    assert not get_scaffold("grammar-fine").is_valid(tasks[0], clf)
    assert sc.render(tasks[0], clf) == get_scaffold("grammar").render(tasks[0], clf)
    counts = collections.Counter(sc.grammar_key(t) for t in tasks)
    assert counts == {"classifier": 1, "regressor": 1}


_PROGRAMS = {
    "grammar-fine": ("make_pipeline(QuantileTransformer(n_quantiles=100), GradientBoostingClassifier(n_estimators=25, "
                     "learning_rate=0.06, max_depth=2))",
                     "make_pipeline(StandardScaler(), PCA(n_components=0.95), KNeighborsRegressor(n_neighbors=17, "
                     "weights='uniform'))"),
    "grammar-dense": ("make_pipeline(QuantileTransformer(n_quantiles=100), HistGradientBoostingClassifier(max_iter=37, "
                      "learning_rate=0.137, max_leaf_nodes=13))",
                      "make_pipeline(StandardScaler(), Lasso(alpha=0.0047, max_iter=5000))"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_PROGRAMS))
def test_programs_of_the_fine_and_dense_grammars_run(small_suite, name):
    """One program of each kind runs in the sandbox and is graded (about 5-10 s per scaffold)."""
    from wmrl.execution.runner import execute
    from wmrl.execution.types import ExecutionRequest
    from wmrl.tasks.datasets import SMALL_BINARY_TASK, SMALL_REGRESSION_TASK
    from wmrl.tasks.loader import TaskSuite

    sc = get_scaffold(name)
    suite = TaskSuite([small_suite])
    for task_id, comp in zip((SMALL_BINARY_TASK, SMALL_REGRESSION_TASK), _PROGRAMS[name], strict=True):
        task = suite.get(task_id)
        assert sc.is_valid(task, comp)
        r = execute(ExecutionRequest(task=task, program=sc.render(task, comp)))
        assert r.status.value == "ok" and r.reward is not None, r.error
