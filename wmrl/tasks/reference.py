"""The reference pool behind the built-in leaderboards, and the command that rebuilds them.

For every built-in task, :func:`reference_pool` gives at least 30 diverse solutions written as
``build_model()`` sources for :func:`wmrl.tasks.harness.render_solution`: baselines that predict a
constant or a random draw (deliberately weak), linear models with and without scaling, naive Bayes,
k-nearest neighbours, single trees from stumps to unpruned, bagging, random forests, extra trees,
AdaBoost, gradient boosting (exact and histogram), small neural networks, SVMs, and pipelines with
PCA, feature selection or quantile transforms. Hyper-parameters span under- to over-fitting. On
large tables (more than 15,000 training rows) the expensive models get cheaper settings (fewer
trees, fewer iterations, linear SVMs instead of kernel SVMs) so that the whole pool of all tasks
costs about half an hour of CPU time on 2 cores.

:func:`wmrl.execution.leaderboards.rebuild_leaderboards` executes every solution once, for real, through the execution
package's sandboxed :class:`~wmrl.execution.pool.LocalExecutor`, and writes the successful raw scores, sorted
best-first, to ``wmrl/tasks/leaderboards/<task_id>.csv`` (``rank,score``), plus one row per run to
``wmrl/tasks/leaderboards/reference_runs.csv`` (status, score, wall seconds, CPU-seconds).
"""
from __future__ import annotations

from wmrl.tasks.harness import render_solution
from wmrl.tasks.spec import Task

#: Training rows above which the expensive reference models get cheaper settings.
BIG_TASK_ROWS = 15_000


def _src(body: str) -> str:
    return f"def build_model():\n    return {body}\n"


def _classifier_pool(task: Task) -> list[tuple[str, str]]:
    big = task.n_train > BIG_TASK_ROWS
    k = max(1, min(5, task.n_features))
    n_rf = 25 if big else 100
    n_gb = 25 if big else 100
    mlp_iter = 40 if big else 200
    pool = [
        ("dummy_prior", "DummyClassifier(strategy='prior')"),
        ("dummy_stratified", "DummyClassifier(strategy='stratified', random_state=0)"),
        ("logreg_c1", "make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=1000))"),
        ("logreg_c0.01", "make_pipeline(StandardScaler(), LogisticRegression(C=0.01, max_iter=1000))"),
        ("logreg_c100", "make_pipeline(StandardScaler(), LogisticRegression(C=100.0, max_iter=1000))"),
        ("logreg_unscaled", "LogisticRegression(max_iter=50)"),
        ("ridge_classifier", "make_pipeline(StandardScaler(), RidgeClassifier(alpha=1.0))"),
        ("sgd_log", "make_pipeline(StandardScaler(), SGDClassifier(loss='log_loss', alpha=1e-3, random_state=0))"),
        ("linear_svc", "make_pipeline(StandardScaler(), LinearSVC(C=0.1))"),
        ("gaussian_nb", "GaussianNB()"),
        ("bernoulli_nb", "make_pipeline(StandardScaler(), BernoulliNB())"),
        ("tree_d3", "DecisionTreeClassifier(max_depth=3, random_state=0)"),
        ("tree_d8", "DecisionTreeClassifier(max_depth=8, min_samples_leaf=5, random_state=0)"),
        ("tree_full", "DecisionTreeClassifier(random_state=0)"),
        ("knn_5", "make_pipeline(StandardScaler(), KNeighborsClassifier(n_neighbors=5))"),
        ("knn_25", "make_pipeline(StandardScaler(), KNeighborsClassifier(n_neighbors=25, weights='distance'))"),
        ("knn_1_unscaled", "KNeighborsClassifier(n_neighbors=1)"),
        ("rf", f"RandomForestClassifier(n_estimators={n_rf}, min_samples_leaf=2, random_state=0)"),
        ("rf_shallow", f"RandomForestClassifier(n_estimators={n_rf // 2}, max_depth=5, random_state=0)"),
        ("extra_trees", f"ExtraTreesClassifier(n_estimators={n_rf}, min_samples_leaf=3, random_state=0)"),
        ("bagged_trees",
         f"BaggingClassifier(DecisionTreeClassifier(max_depth=10), n_estimators={n_rf // 5}, random_state=0)"),
        ("adaboost", "AdaBoostClassifier(n_estimators=50, random_state=0)"),
        ("gbm", f"GradientBoostingClassifier(n_estimators={n_gb}, max_depth=3, random_state=0)"),
        ("gbm_stumps",
         f"GradientBoostingClassifier(n_estimators={n_gb}, max_depth=1, learning_rate=0.3, random_state=0)"),
        ("hgb", "HistGradientBoostingClassifier(random_state=0)"),
        ("hgb_slow",
         "HistGradientBoostingClassifier(learning_rate=0.05, max_iter=300, early_stopping=True, random_state=0)"),
        ("hgb_small", "HistGradientBoostingClassifier(max_depth=3, max_iter=50, random_state=0)"),
        ("hgb_reg",
         "HistGradientBoostingClassifier(max_leaf_nodes=15, l2_regularization=1.0, max_iter=150, random_state=0)"),
        ("mlp",
         f"make_pipeline(StandardScaler(), MLPClassifier(hidden_layer_sizes=(64,), max_iter={mlp_iter}, "
         "early_stopping=True, random_state=0))"),
        ("mlp_deep",
         f"make_pipeline(StandardScaler(), MLPClassifier(hidden_layer_sizes=(32, 16), alpha=1e-2, max_iter={mlp_iter}, "
         "random_state=0))"),
        ("pca_logreg", f"make_pipeline(StandardScaler(), PCA(n_components={k}), LogisticRegression(max_iter=1000))"),
        ("kbest_logreg",
         f"make_pipeline(StandardScaler(), SelectKBest(f_classif, k={k}), LogisticRegression(max_iter=1000))"),
        ("quantile_logreg", "make_pipeline(QuantileTransformer(n_quantiles=100), LogisticRegression(max_iter=1000))"),
    ]
    if big:
        pool.append(("sgd_hinge", "make_pipeline(StandardScaler(), SGDClassifier(loss='hinge', random_state=0))"))
    else:
        pool.append(("svc_rbf", "make_pipeline(StandardScaler(), SVC(C=1.0))"))
    return pool


def _regressor_pool(task: Task) -> list[tuple[str, str]]:
    big = task.n_train > BIG_TASK_ROWS
    k = max(1, min(5, task.n_features))
    n_rf = 25 if big else 100
    n_gb = 25 if big else 100
    mlp_iter = 40 if big else 200
    scaled_y = "TransformedTargetRegressor(regressor={}, transformer=StandardScaler())"
    pool = [
        ("dummy_mean", "DummyRegressor(strategy='mean')"),
        ("dummy_median", "DummyRegressor(strategy='median')"),
        ("linear", "LinearRegression()"),
        ("ridge_1", "make_pipeline(StandardScaler(), Ridge(alpha=1.0))"),
        ("ridge_100", "make_pipeline(StandardScaler(), Ridge(alpha=100.0))"),
        ("lasso", "make_pipeline(StandardScaler(), Lasso(alpha=0.1, max_iter=5000))"),
        ("elastic_net", "make_pipeline(StandardScaler(), ElasticNet(alpha=1.0, l1_ratio=0.5, max_iter=5000))"),
        ("huber", "make_pipeline(StandardScaler(), HuberRegressor(max_iter=200))"),
        ("sgd", scaled_y.format("make_pipeline(StandardScaler(), SGDRegressor(random_state=0))")),
        ("linear_svr", scaled_y.format("make_pipeline(StandardScaler(), LinearSVR(C=0.1, max_iter=5000))")),
        ("tree_d3", "DecisionTreeRegressor(max_depth=3, random_state=0)"),
        ("tree_d8", "DecisionTreeRegressor(max_depth=8, min_samples_leaf=5, random_state=0)"),
        ("tree_full", "DecisionTreeRegressor(random_state=0)"),
        ("knn_5", "make_pipeline(StandardScaler(), KNeighborsRegressor(n_neighbors=5))"),
        ("knn_25", "make_pipeline(StandardScaler(), KNeighborsRegressor(n_neighbors=25, weights='distance'))"),
        ("knn_1_unscaled", "KNeighborsRegressor(n_neighbors=1)"),
        ("rf", f"RandomForestRegressor(n_estimators={n_rf}, min_samples_leaf=2, max_features=0.5, random_state=0)"),
        ("rf_shallow", f"RandomForestRegressor(n_estimators={n_rf // 2}, max_depth=5, random_state=0)"),
        ("extra_trees", f"ExtraTreesRegressor(n_estimators={n_rf}, min_samples_leaf=3, random_state=0)"),
        ("bagged_trees",
         f"BaggingRegressor(DecisionTreeRegressor(max_depth=10), n_estimators={n_rf // 5}, random_state=0)"),
        ("adaboost", "AdaBoostRegressor(n_estimators=50, random_state=0)"),
        ("gbm", f"GradientBoostingRegressor(n_estimators={n_gb}, max_depth=3, random_state=0)"),
        ("gbm_stumps",
         f"GradientBoostingRegressor(n_estimators={n_gb}, max_depth=1, learning_rate=0.3, random_state=0)"),
        ("hgb", "HistGradientBoostingRegressor(random_state=0)"),
        ("hgb_slow",
         "HistGradientBoostingRegressor(learning_rate=0.05, max_iter=300, early_stopping=True, random_state=0)"),
        ("hgb_small", "HistGradientBoostingRegressor(max_depth=3, max_iter=50, random_state=0)"),
        ("hgb_l1", "HistGradientBoostingRegressor(loss='absolute_error', max_iter=150, random_state=0)"),
        ("mlp_unscaled_target",
         f"make_pipeline(StandardScaler(), MLPRegressor(hidden_layer_sizes=(64,), max_iter={mlp_iter}, "
         "random_state=0))"),
        ("mlp",
         scaled_y.format("make_pipeline(StandardScaler(), MLPRegressor(hidden_layer_sizes=(64, 32), alpha=1e-2, "
                         f"max_iter={mlp_iter}, early_stopping=True, random_state=0))")),
        ("pca_ridge", f"make_pipeline(StandardScaler(), PCA(n_components={k}), Ridge())"),
        ("kbest_poly_ridge",
         f"make_pipeline(StandardScaler(), SelectKBest(f_regression, k={k}), PolynomialFeatures(2), "
         "Ridge(alpha=10.0))"),
        ("quantile_ridge", "make_pipeline(QuantileTransformer(n_quantiles=100), Ridge())"),
    ]
    if big:
        pool.append(("sgd_huber",
                     scaled_y.format("make_pipeline(StandardScaler(), SGDRegressor(loss='huber', random_state=0))")))
    else:
        pool.append(("svr_rbf", scaled_y.format("make_pipeline(StandardScaler(), SVR(C=1.0))")))
    return pool


def reference_pool(task: Task) -> list[tuple[str, str]]:
    """The reference solutions of a task: ``(name, model_source)`` pairs, at least 30, names unique.

    ``model_source`` defines ``build_model()`` for :func:`wmrl.tasks.harness.render_solution`.
    """
    pool = _regressor_pool(task) if task.type == "regression" else _classifier_pool(task)
    return [(name, _src(body)) for name, body in pool]


def reference_programs(task: Task) -> list[tuple[str, str]]:
    """``(name, program)`` pairs: the reference pool rendered by the harness."""
    return [(name, render_solution(task, src)) for name, src in reference_pool(task)]
