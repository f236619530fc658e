"""An external agent loop on wmrl's Gymnasium environment (wmrl.episodes.env.ResearchEnv; docs/multiturn-env.md).

A trivial scripted agent tries two scikit-learn pipelines with ``validate``, keeps the better by validation
score and ``submit``s it: once against the world model (nothing is executed: the world model is the simulator)
and once against real sandboxed execution. The world model is a real one: a RegressionWorldModel on the tiny
random backbone (no download), fitted in a few seconds on a handful of programs executed here for the
purpose, or the one saved in ``--world-model DIR`` (with the backbone it was fitted on, ``--model``).

    python examples/research_env.py                       # built-in suite, task vcdextra-titanicp
    python examples/research_env.py --tasks DIR --task ID --world-model runs/quickstart/world_model --model smollm2-135m

Runs offline on a CPU in about a minute (bubblewrap needed for the sandbox).
"""
from __future__ import annotations

import argparse
import os
import time

import torch

from wmrl.episodes.env import ProgramScaffold, ResearchEnv
from wmrl.execution.pool import LocalExecutor
from wmrl.execution.types import ExecutionRequest
from wmrl.models.backbone import load_backbone
from wmrl.tasks.loader import TaskSuite, default_suite
from wmrl.world_model.data import WorldModelExample
from wmrl.world_model.factory import load_world_model
from wmrl.world_model.regression import RegressionWorldModel

# Offline before transformers is first imported (wmrl.models.backbone imports it when a backbone is loaded).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

#: A complete program (the environment's default way code is given) around one scikit-learn estimator.
TEMPLATE = '''import pandas as pd
from sklearn.pipeline import make_pipeline
from sklearn.impute import SimpleImputer
from sklearn.preprocessing import StandardScaler
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor, HistGradientBoostingClassifier
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor

train = pd.read_csv("input/train.csv")
test = pd.read_csv("input/test.csv")
y = train["{target}"]
X = pd.get_dummies(train.drop(columns=["{id}", "{target}"]), dummy_na=True).astype(float)
Xt = pd.get_dummies(test.drop(columns=["{id}"]), dummy_na=True).reindex(columns=X.columns, fill_value=0).astype(float)
model = make_pipeline(SimpleImputer(), StandardScaler(), {model}).fit(X, y)
pd.DataFrame({{"{id}": test["{id}"], "{target}": model.predict(Xt)}}).to_csv("submission.csv", index=False)
'''
CLASSIFIERS = {
    "logistic": "LogisticRegression(C=1.0, max_iter=500)",
    "forest": "RandomForestClassifier(n_estimators=200, max_depth=6, random_state=0)",
    # more programs for the world model's warm-up corpus
    "logistic-weak": "LogisticRegression(C=0.001, max_iter=500)",
    "forest-deep": "RandomForestClassifier(n_estimators=50, random_state=0)",
    "hgb": "HistGradientBoostingClassifier(max_iter=100, random_state=0)",
    "knn-1": "KNeighborsClassifier(n_neighbors=1)",
}
REGRESSORS = {
    "ridge": "Ridge(alpha=1.0)",
    "forest": "RandomForestRegressor(n_estimators=200, max_depth=8, random_state=0)",
    "ridge-strong": "Ridge(alpha=10000.0)",
    "forest-deep": "RandomForestRegressor(n_estimators=50, random_state=0)",
    "hgb": "HistGradientBoostingRegressor(max_iter=100, random_state=0)",
    "knn-1": "KNeighborsRegressor(n_neighbors=1)",
}


def programs_for(task) -> dict[str, str]:
    """The programs of the template for ``task``: name -> complete Python program."""
    if task.type != "regression" and task.metric not in ("accuracy", "macro_f1"):
        raise SystemExit(f"this example's programs write predicted labels or values; task {task.id} wants "
                         f"{task.metric} (probabilities): pick a regression or accuracy task with --task")
    models = REGRESSORS if task.type == "regression" else CLASSIFIERS
    return {n: TEMPLATE.format(target=task.target, id=task.id_column, model=m) for n, m in models.items()}


def scripted_agent(env, task_id: str, candidates: dict[str, str], seed: int = 0) -> float:
    """One episode: validate every candidate, submit the best by validation score. Returns the reward."""
    obs, info = env.reset(seed=seed, options={"task_id": task_id})
    print(f"--- episode on {info['task_id']} ({info['backend']} backend, metric {info['metric']}, "
          f"{info['direction']}, up to {info['max_turns']} turns)")
    print("reset obs['text'] (the task prompt):\n  " + obs["text"].replace("\n", "\n  "))
    best_name, best_score = None, None
    for name, code in candidates.items():
        obs, reward, terminated, truncated, info = env.step({"action": "validate", "code": code})
        print(f"turn {obs['turn']}: validate {name!r} -> reward {reward}, terminated {terminated}, "
              f"truncated {truncated}\n  " + obs["text"].replace("\n", "\n  "))
        if obs["has_validation_score"]:
            s = float(obs["validation_score"])
            if best_score is None or (s < best_score if info["lower_is_better"] else s > best_score):
                best_name, best_score = name, s
    best_name = best_name or next(iter(candidates))
    obs, reward, terminated, truncated, info = env.step({"action": "submit", "code": candidates[best_name]})
    print(f"turn {obs['turn']}: submit {best_name!r} -> reward {reward:.3f} ({info['reward_source']}), "
          f"terminated {terminated}; grade {info['grade']}; executions per turn {info['executions_turn']}")
    return reward


def fit_world_model(task, programs: dict[str, str], executor, scaffold, model_name: str):
    """A RegressionWorldModel (head only, frozen backbone) fitted on ``programs`` executed on ``task``.
    Returns ``(world model, median run time of those executions in seconds)``."""
    t0 = time.perf_counter()
    reqs = [ExecutionRequest(task=task, program=scaffold.render(task, code), request_id=f"warmup-{name}")
            for name, code in programs.items()]
    results = executor.run_batch(reqs)
    prompt = scaffold.prompt(task)  # the single-turn prompt: what the environment gives the world model
    records = [WorldModelExample(prompt=prompt, completion=code, reward=float(r.reward), group=("warmup", i))
               for i, ((name, code), r) in enumerate(zip(programs.items(), results)) if r.reward is not None]
    for (name, _), r in zip(programs.items(), results):
        print(f"  warm-up {name:14s} {r.status.value:14s} test score {r.score}  reward {r.reward}")
    model, tok = load_backbone(model_name)
    wm = RegressionWorldModel(model, tok, lora=None)
    wm.fit(records, heldout_fraction=0.0, seed=0)
    print(f"world model fitted on {len(records)} executed programs ({time.perf_counter() - t0:.1f} s with their "
          "executions)")
    walls = sorted(float(r.wall_s) for r in results)
    return wm, walls[len(walls) // 2]  # the median run time, for the world model's observations


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", help="task folder (default: the built-in suite, $WMRL_TASKS_ROOT)")
    ap.add_argument("--task", default="vcdextra-titanicp", help="task id")
    ap.add_argument("--world-model", help="a saved world model folder (default: fit one here)")
    ap.add_argument("--model", default="tiny", help="the world model's backbone (tiny, smollm2-135m, ...)")
    args = ap.parse_args()

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    suite = TaskSuite(args.tasks) if args.tasks else default_suite()
    task = suite.get(args.task)
    programs = programs_for(task)
    candidates = dict(list(programs.items())[:2])  # the agent's two pipelines
    with LocalExecutor(max_workers=2) as executor:
        if args.world_model:
            model, tok = load_backbone(args.model)
            wm, wall_s = load_world_model(args.world_model, model, tok), None
        else:
            wm, wall_s = fit_world_model(task, programs, executor, ProgramScaffold(), args.model)
        # the external agent, against the world model: nothing runs
        with ResearchEnv([task], backend="world_model", world_model=wm, wm_wall_s=wall_s, max_turns=3) as sim:
            r_sim = scripted_agent(sim, task.id, candidates)
            print(f"executions in the world-model episode: {sim.executions}")
        # the same agent against real execution
        with ResearchEnv([task], backend="execution", executor=executor, max_turns=3) as real:
            r_real = scripted_agent(real, task.id, candidates)
            print(f"executions in the real episode: {real.executions}")
    print(f"reward: world model {r_sim:.3f}, real execution {r_real:.3f}; {time.perf_counter() - t0:.0f} s in all")


if __name__ == "__main__":
    main()
