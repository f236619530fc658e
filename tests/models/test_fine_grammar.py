"""The ``grammar-fine`` scaffold: its language (the ``grammar`` scaffold's families with fine numeric grids),
canonical decoding within the token budget, real execution, and that a policy concentrated on one model
family still writes mostly new programs."""
from __future__ import annotations

import collections
import random
import re

import pytest

from wmrl.models.choice_trie import ChoiceTrie
from wmrl.models.fine_grammar import fine_grammar_sentences
from wmrl.models.scaffolds import get_scaffold, grammar_sentences

_FAMILY = re.compile(r"(\w+)\([^()]*\)\)$")  # the last call of the pipeline: the model


def _family(sentence: str) -> str:
    m = _FAMILY.search(sentence)
    assert m, sentence
    return m.group(1)


def test_fine_grammar_is_the_documented_language():
    clf, reg = fine_grammar_sentences("classifier"), fine_grammar_sentences("regressor")
    assert (len(clf), len(reg)) == (17 * 2738, 17 * 2751)
    for ss in (clf, reg):
        assert len(set(ss)) == len(ss) and all(s.startswith("make_pipeline(") and s.endswith(")") for s in ss)
        assert not any(", )" in s or "(, " in s for s in ss)
    assert not set(clf) & set(reg)
    # the same preprocessing and the same model families as the grammar scaffold, per kind
    for kind, fine in (("classifier", clf), ("regressor", reg)):
        coarse = grammar_sentences(kind)
        assert {_family(s) for s in fine} == {_family(s) for s in coarse}
        assert {s[:s.rindex(_family(s))] for s in fine} == {s[:s.rindex(_family(s))] for s in coarse}
    for s in ("make_pipeline(HistGradientBoostingClassifier(max_iter=175, learning_rate=0.04, max_leaf_nodes=23))",
              "make_pipeline(StandardScaler(), LogisticRegression(C=0.007, max_iter=1000))",
              "make_pipeline(KNeighborsClassifier(n_neighbors=13, weights='distance'))"):
        assert s in clf
    assert "make_pipeline(RobustScaler(), PCA(n_components=0.8), Ridge(alpha=30.0))" in reg
    with pytest.raises(KeyError):
        fine_grammar_sentences("ranker")


def test_each_model_family_has_many_more_programs_than_in_the_grammar_scaffold():
    """The point of the scaffold: inside one family (what a concentrating policy settles on) the fine grammar
    offers at least 8x the programs of the grammar scaffold, for every family with a numeric hyperparameter."""
    for kind in ("classifier", "regressor"):
        fine = collections.Counter(_family(s) for s in fine_grammar_sentences(kind))
        coarse = collections.Counter(_family(s) for s in grammar_sentences(kind))
        ratios = {f: fine[f] / coarse[f] for f in coarse if coarse[f] > 17}  # GaussianNB() has no parameter
        assert ratios and min(ratios.values()) >= 2.0, ratios
        assert sum(fine.values()) >= 15 * sum(coarse.values())


def test_samples_of_one_family_rarely_repeat():
    """A policy that has settled on one model family but still spreads over the family's choices: 16 samples a
    step for 40 steps repeat an earlier program in under 5 % of draws with the fine grammar, and in over 40 %
    with the grammar scaffold (draws uniform within the family)."""
    def repeat_rate(sentences):
        family = [s for s in sentences if "HistGradientBoostingClassifier(" in s]
        rng, seen, hits = random.Random(0), set(), 0
        for _ in range(40 * 16):
            s = rng.choice(family)
            hits += s in seen
            seen.add(s)
        return hits / (40 * 16)

    assert repeat_rate(fine_grammar_sentences("classifier")) < 0.05
    assert repeat_rate(grammar_sentences("classifier")) > 0.40


@pytest.mark.slow
def test_every_sentence_decodes_canonically_within_the_budget(tiny):
    """Each sentence's canonical tokenization is a path of the choice trie that ends with the stop token; no two
    sentences share a tokenization; the longest fits the scaffold's and the trainer's default token budget."""
    from wmrl.training.config import TrainConfig

    _, tok = tiny
    stop = tok.eos_token_id
    sc = get_scaffold("grammar-fine")
    longest = 0
    for kind in ("classifier", "regressor"):
        sentences = fine_grammar_sentences(kind)
        trie = ChoiceTrie.from_sentences(tok, sentences, stop)
        assert sum(trie.terminal) == len(sentences)
        longest = max(longest, trie.max_length)
        ids = tok(list(sentences), add_special_tokens=False)["input_ids"]
        for i in random.Random(kind).sample(range(len(sentences)), 300):
            m = trie.matcher()
            assert all(m.accept_token(t) for t in ids[i]), sentences[i]
            assert m.accept_token(stop) and m.is_terminated(), sentences[i]
            assert tok.decode(ids[i]) == sentences[i]
    assert longest == 64
    assert longest <= sc.default_max_new_tokens and longest <= TrainConfig().rollout.max_new_tokens


def test_scaffold_accepts_only_its_own_kind(tasks):
    sc = get_scaffold("grammar-fine")
    clf = "make_pipeline(MinMaxScaler(), RandomForestClassifier(n_estimators=75, max_depth=12, min_samples_leaf=3))"
    assert sc.is_valid(tasks[0], clf) and not sc.is_valid(tasks[1], clf)
    assert not get_scaffold("grammar").is_valid(tasks[0], clf)
    assert sc.grammar_key(tasks[0]) == "classifier" and sc.grammar_key(tasks[1]) == "regressor"
    assert sc.render(tasks[0], clf) == get_scaffold("grammar").render(tasks[0], clf)
