"""The ``grammar-fail`` scaffold: its language, canonical decoding, token budget, rendering, and real
executions whose failures get their status through the normal sandbox + grader path."""
from __future__ import annotations

import ast

import pytest

from wmrl.models.choice_trie import ChoiceTrie
from wmrl.models.fail_grammar import EXTRA_IMPORTS, fail_grammar_sentences
from wmrl.models.scaffolds import get_scaffold, grammar_sentences


def test_fail_grammar_is_the_documented_language():
    clf, reg = fail_grammar_sentences("classifier"), fail_grammar_sentences("regressor")
    # 24 preprocessing choices (4 scalers x 6 feature steps) x 91 / 84 models
    assert (len(clf), len(reg)) == (24 * 91, 24 * 84)
    for ss in (clf, reg):
        assert len(set(ss)) == len(ss) and all(s.startswith("make_pipeline(") and s.endswith(")") for s in ss)
        assert not any(", )" in s or "(, " in s for s in ss)
    for s in ("make_pipeline(LogisticRegression(C=1.0, penalty='l1', solver='lbfgs', max_iter=1000))",
              "make_pipeline(StandardScaler(), FunctionTransformer(np.log1p), MultinomialNB(alpha=1.0))",
              "make_pipeline(PCA(n_components=32), SVC(C=1.0, probability=True))",
              "make_pipeline(PolynomialFeatures(degree=3), LinearSVC(C=0.1))"):
        assert s in clf
    assert ("make_pipeline(TransformedTargetRegressor(regressor=SGDRegressor(), func=np.log, inverse_func=np.exp))"
            in reg)
    assert "make_pipeline(GaussianNB())" in clf and "make_pipeline(Ridge(alpha=1.0))" in reg
    assert not set(clf) & set(reg)
    with pytest.raises(KeyError):
        fail_grammar_sentences("ranker")


def test_grammar_scaffold_is_unchanged_and_the_two_languages_differ(tasks):
    assert (len(grammar_sentences("classifier")), len(grammar_sentences("regressor"))) == (17 * 179, 17 * 182)
    sc, plain = get_scaffold("grammar-fail"), get_scaffold("grammar")
    only_plain = "make_pipeline(QuantileTransformer(n_quantiles=100), GaussianNB())"
    only_fail = "make_pipeline(PCA(n_components=32), LinearSVC(C=1.0))"
    assert plain.is_valid(tasks[0], only_plain) and not sc.is_valid(tasks[0], only_plain)
    assert sc.is_valid(tasks[0], only_fail) and not plain.is_valid(tasks[0], only_fail)
    assert not sc.is_valid(tasks[1], only_fail)  # a classifier for a regression task
    assert not sc.is_valid(tasks[0], "make_pipeline(GaussianNB()")
    assert sc.grammar_key(tasks[0]) == "classifier" and sc.grammar_key(tasks[1]) == "regressor"
    assert "feature step" in sc.prompt(tasks[0]) and "roc_auc" in sc.prompt(tasks[0])


@pytest.mark.parametrize("kind", ["classifier", "regressor"])
def test_every_sentence_decodes_canonically(tiny, kind):
    """Each sentence's canonical tokenization is a path of the choice trie that ends with the stop token, and
    no two sentences share a tokenization (the trie has one terminal per sentence)."""
    _, tok = tiny
    stop = tok.eos_token_id
    sentences = fail_grammar_sentences(kind)
    trie = ChoiceTrie.from_sentences(tok, sentences, stop)
    assert sum(trie.terminal) == len(sentences)
    for s, ids in zip(sentences, tok(list(sentences), add_special_tokens=False)["input_ids"]):
        m = trie.matcher()
        assert all(m.accept_token(t) for t in ids), s
        assert m.accept_token(stop) and m.is_terminated(), s
        assert tok.decode(ids) == s


def test_sampling_is_canonical_and_the_longest_sentence_fits_the_budget(tasks):
    from wmrl.models.policy import Policy
    from wmrl.training.config import TrainConfig

    from wmrl.models.backbone import tiny_backbone

    pol = Policy(*tiny_backbone(seed=0), lora=None)  # fresh weights: a policy may change its model
    sc = get_scaffold("grammar-fail")
    need = pol.min_new_tokens(sc, tasks)
    longest = max(len(ids) + 1 for k in ("classifier", "regressor")
                  for ids in pol.tokenizer(list(fail_grammar_sentences(k)), add_special_tokens=False)["input_ids"])
    assert need == longest == 56
    assert need <= sc.default_max_new_tokens and need <= TrainConfig().rollout.max_new_tokens
    batch = pol.sample(tasks, sc, group_size=4, generator_seed=5)
    assert batch.valid is not None and all(batch.valid)
    P = batch.prompt_len
    for i, comp in enumerate(batch.completions):
        n = int(batch.completion_mask[i].sum())
        assert batch.input_ids[i, P:P + n].tolist() == (pol.tokenizer(comp, add_special_tokens=False)["input_ids"]
                                                        + [pol.eos_token_ids[0]])
        assert comp in fail_grammar_sentences(sc.grammar_key(tasks[i // 4]))


def test_render_uses_the_harness_as_is_and_builds_real_estimators(tasks):
    from sklearn.base import is_classifier, is_regressor

    from wmrl.tasks.harness import import_block, render_solution

    sc = get_scaffold("grammar-fail")
    comp = "make_pipeline(RobustScaler(), FunctionTransformer(np.log1p), MultinomialNB(alpha=0.1))"
    src = sc.function_source(comp)
    assert src.startswith("\n".join(EXTRA_IMPORTS))
    ns: dict = {}
    exec(import_block() + "\n" + src, ns)  # noqa: S102 - text produced by our grammar
    assert is_classifier(ns["build_model"]())
    reg = "make_pipeline(TransformedTargetRegressor(regressor=SGDRegressor(), func=np.log, inverse_func=np.exp))"
    ns = {}
    exec(import_block() + "\n" + sc.function_source(reg), ns)  # noqa: S102
    model = ns["build_model"]()
    assert is_regressor(model) and model.get_params()["transformedtargetregressor__regressor__random_state"] == 0
    prog = sc.render(tasks[0], comp)
    ast.parse(prog)
    assert "_class_scores(model, X_test" in prog and "nan_to_num" not in prog
    assert prog == render_solution(tasks[0], src, output="as_is")
    # the guarded harness (every other scaffold) keeps its guards
    guarded = get_scaffold("grammar").render(tasks[1], "make_pipeline(Ridge(alpha=1.0))")
    assert "np.nan_to_num(pred" in guarded and "_class_scores" not in guarded
    with pytest.raises(ValueError, match="guarded, as_is"):
        render_solution(tasks[0], src, output="raw")


# ------------------------------------------------------------------------------ real executions


def _run(task, completion, time_limit_s=None):
    from wmrl.execution.runner import execute
    from wmrl.execution.types import ExecutionRequest

    sc = get_scaffold("grammar-fail")
    assert sc.is_valid(task, completion)
    return execute(ExecutionRequest(task=task, program=sc.render(task, completion), time_limit_s=time_limit_s))


@pytest.mark.slow
def test_failures_get_their_status_from_real_execution(small_suite, task_factory, tmp_path):
    """Programs of the grammar run in the sandbox and are graded as every program is: each failing kind
    gets its status from the real exception, time-out or grader verdict (about 15-25 s)."""
    from wmrl.tasks.datasets import SMALL_BINARY_TASK, SMALL_REGRESSION_TASK
    from wmrl.tasks.loader import TaskSuite

    suite = TaskSuite([small_suite])
    titanic, houses = suite.get(SMALL_BINARY_TASK), suite.get(SMALL_REGRESSION_TASK)
    ok = _run(houses, "make_pipeline(StandardScaler(), Ridge(alpha=1.0))")
    assert ok.status.value == "ok" and ok.reward is not None, ok.error
    # PCA wider than the table (titanic has 8 encoded columns): sklearn's ValueError
    r = _run(titanic, "make_pipeline(PCA(n_components=32), GaussianNB())")
    assert r.status.value == "runtime_error" and "n_components=32 must be between 0 and" in r.stderr
    r = _run(titanic, "make_pipeline(LogisticRegression(C=1.0, penalty='l1', solver='lbfgs', max_iter=1000))")
    assert r.status.value == "runtime_error" and "supports only 'l2' or None penalties" in r.stderr
    # exp of an SGD regressor's log-price predictions on unscaled squared features overflows: the grader
    # refuses infinities
    r = _run(houses, "make_pipeline(PolynomialFeatures(degree=2), TransformedTargetRegressor("
                     "regressor=SGDRegressor(), func=np.log, inverse_func=np.exp))")
    assert r.status.value == "invalid_submission" and "infinite value" in r.error
    # decision scores written as probabilities for a probability metric (roc_auc); the same model is fine
    # on a label metric (titanic's accuracy)
    auc = task_factory(tmp_path / "auc", "binary", n=300)
    r = _run(auc, "make_pipeline(StandardScaler(), LinearSVC(C=1.0))")
    assert r.status.value == "invalid_submission" and "probabilities must lie in [0, 1]" in r.error
    assert _run(titanic, "make_pipeline(StandardScaler(), LinearSVC(C=1.0))").status.value == "ok"
    # degree-3 polynomial features of a 503-column table: C(506, 3) = 21M columns, 15 GB: the memory limit
    wide = task_factory(tmp_path / "wide", "binary", n=240, extra_numeric=496)
    r = _run(wide, "make_pipeline(PolynomialFeatures(degree=3), GaussianNB())")
    assert r.status.value == "memory_exceeded", (r.status, r.error, r.stderr[-300:])
    # 1000 unpruned trees on 6,000 rows do not fit a limit a few seconds above a fast model's whole run (start-up,
    # reading, fitting, writing); the limit is set from that run, so a slower or busier machine moves both
    big = task_factory(tmp_path / "big", "binary", n=6000, extra_numeric=20)
    small = _run(big, "make_pipeline(GaussianNB())")
    assert small.status.value == "ok", small.error
    r = _run(big, "make_pipeline(RandomForestClassifier(n_estimators=1000, max_depth=None, min_samples_leaf=1))",
             time_limit_s=small.wall_s + 3.0)
    assert r.status.value == "timeout", (r.status, r.wall_s, small.wall_s)
