"""Scaffold prompts, stop points, rendering and validity checks (no model needed)."""
from __future__ import annotations

import ast

import pytest

from wmrl.interfaces import Scaffold
from wmrl.models.scaffolds import DEFAULT_SCAFFOLD, SCAFFOLDS, get_scaffold, grammar_sentences


@pytest.mark.parametrize("name", SCAFFOLDS.names())
def test_protocol_and_prompt(name, tasks):
    sc = get_scaffold(name)
    assert isinstance(sc, Scaffold) and sc.name == name
    p = sc.prompt(tasks[0])
    assert "roc_auc" in p and "region(cat3)" in p and "age(num)" in p
    assert len(p) < 1200  # compact prompts: CPU forward passes are the cost


def test_default_is_known():
    assert DEFAULT_SCAFFOLD in SCAFFOLDS.names()


def test_unknown_scaffold():
    with pytest.raises(ValueError, match="script, function, grammar"):
        get_scaffold("essay")


def test_function_scaffold_cuts_at_end_of_function(tasks):
    sc = get_scaffold("function")
    comp = "return RandomForestClassifier(n_estimators=10)\nprint('hello')\n```"
    assert sc.stop_at(comp) == comp.index("\nprint")
    src = sc.function_source(comp)
    assert "print" not in src and src.startswith("def build_model():")
    assert sc.is_valid(tasks[0], comp)
    assert not sc.is_valid(tasks[0], "x = (\n")
    assert sc.is_valid(tasks[0], "model = GaussianNB()\n    return model\n```")
    assert sc.is_valid(tasks[0], " return GaussianNB()")  # a token with a leading space after the indentation
    prog = sc.render(tasks[0], comp)
    ast.parse(prog)
    assert "RandomForestClassifier(n_estimators=10)" in prog


def test_script_scaffold_extracts_code_block(tasks):
    sc = get_scaffold("script")
    comp = "df = pd.read_csv('input/train.csv')\nprint(df.shape)\n```\nThis script..."
    prog = sc.render(tasks[0], comp)
    assert prog.startswith("import pandas as pd\n") and "This script" not in prog
    assert sc.is_valid(tasks[0], comp)
    assert not sc.is_valid(tasks[0], "def f(:\n```")


def test_grammar_accepts_and_rejects(tasks):
    sc = get_scaffold("grammar")
    clf_task, reg_task = tasks[0], tasks[1]
    good = ("make_pipeline(StandardScaler(), PCA(n_components=0.95), "
            "HistGradientBoostingClassifier(max_iter=100, learning_rate=0.1, max_leaf_nodes=31))")
    assert sc.is_valid(clf_task, good)
    assert not sc.is_valid(reg_task, good)
    assert sc.is_valid(reg_task, "make_pipeline(Ridge(alpha=1.0))")
    assert not sc.is_valid(clf_task, "make_pipeline(PCA(n_components=0.95), GaussianNB())")  # PCA only after a scaler
    assert not sc.is_valid(clf_task, "make_pipeline(GaussianNB()")


def test_grammar_sentences_are_the_documented_language():
    clf, reg = grammar_sentences("classifier"), grammar_sentences("regressor")
    # 17 preprocessing choices (none, 4 scalers, 4 scalers x 3 PCA) x 179 / 182 models
    assert (len(clf), len(reg)) == (17 * 179, 17 * 182)
    assert len(set(clf)) == len(clf) and all(s.startswith("make_pipeline(") and s.endswith(")") for s in clf)
    assert "make_pipeline(GaussianNB())" in clf and "make_pipeline(Ridge(alpha=0.1))" in reg
    with pytest.raises(KeyError):
        grammar_sentences("ranker")


def test_grammar_render_builds_a_real_estimator(tasks):
    """The rendered build_model() runs and returns a fitted-able sklearn pipeline (in-process, trusted text)."""
    from sklearn.base import is_classifier, is_regressor

    sc = get_scaffold("grammar")
    comp = ("make_pipeline(QuantileTransformer(n_quantiles=100), "
            "RandomForestRegressor(n_estimators=10, max_depth=3, min_samples_leaf=5))")
    assert sc.is_valid(tasks[1], comp)
    assert not sc.is_valid(tasks[0], comp)  # a regressor for a classification task
    from wmrl.tasks.harness import import_block

    ns: dict = {}
    exec(import_block() + "\n" + sc.function_source(comp), ns)  # noqa: S102 - text produced by our grammar
    model = ns["build_model"]()
    assert is_regressor(model)
    assert model.get_params()["randomforestregressor__random_state"] == 0
    ast.parse(sc.render(tasks[1], comp))
    ns2: dict = {}
    exec(import_block() + "\n" + sc.function_source("make_pipeline(GaussianNB())"), ns2)  # noqa: S102
    assert is_classifier(ns2["build_model"]())
