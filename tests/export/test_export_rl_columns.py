"""The export's columns for RL datasets: ``messages`` (TRL / HF chat format), each turn's own ``prompt``, and the
token ``logprobs`` the policy computed at sampling time."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from wmrl.cli import app


def _export(path) -> pd.DataFrame:
    res = CliRunner().invoke(app, ["export", str(path)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    return pd.read_parquet(path / "samples.parquet")


def test_multiturn_line_exports_turn_prompts_logprobs_and_final_messages(tmp_path):
    from tests.support.fake_run import write_fake_run

    write_fake_run(tmp_path, steps=1, seed=0)
    turns = [{"turn": 1, "stream": "wm", "executed": False, "status": "ok", "reward_true": None, "reward_wm": 0.3,
              "final": False, "completion": "first", "program_sha256": "aa" * 32, "observation": None,
              "observation_wm": None, "prompt": "Task: t", "logprobs": [-0.5, 0.0]},
             {"turn": 2, "stream": "wm", "executed": False, "status": "ok", "reward_true": None, "reward_wm": 0.6,
              "final": True, "completion": "second", "program_sha256": "bb" * 32, "observation": None,
              "observation_wm": None, "prompt": "Task: t\nTurn 1 scored 0.3", "logprobs": [-1.25, -0.125, 0.0]}]
    line = {"step": 1, "group": 0, "sample": 0, "task_id": "t", "stream": "wm", "reward_wm": 0.6,
            "reward_used": 0.6, "advantage": 0.0, "weight": 0.5, "dropped": False, "completion_tokens": 5,
            "program_sha256": "bb" * 32, "prompt": "Task: t", "completion": "second", "logprobs": None,
            "n_turns": 2, "final_turn": 2, "submitted": False, "turns": turns}
    (tmp_path / "samples.jsonl").write_text(json.dumps(line) + "\n")
    row = _export(tmp_path).to_dict("records")[0]
    assert [t["prompt"] for t in row["turns"]] == ["Task: t", "Task: t\nTurn 1 scored 0.3"]
    assert [list(t["logprobs"]) for t in row["turns"]] == [[-0.5, 0.0], [-1.25, -0.125, 0.0]]
    assert list(row["logprobs"]) == [-1.25, -0.125, 0.0]  # the final turn's
    assert [dict(m) for m in row["messages"]] == [{"role": "user", "content": "Task: t\nTurn 1 scored 0.3"},
                                                  {"role": "assistant", "content": "second"}]


def test_a_trained_run_exports_messages_and_the_sampling_logprobs(tmp_path):
    from tests.training.test_loop_fakes import cfg_for, comps
    from wmrl.training.run import run_training

    cfg = cfg_for(tmp_path, "wmrl", 2)
    run = Path(cfg.run_dir)
    run_training(cfg, components=comps("wmrl"))
    lines = [json.loads(x) for x in (run / "samples.jsonl").read_text().splitlines()]
    df = _export(run)
    assert len(df) == len(lines)
    for rec, row in zip(lines, df.to_dict("records")):
        assert rec["logprobs"] and len(rec["logprobs"]) == rec["completion_tokens"]
        assert list(row["logprobs"]) == pytest.approx(rec["logprobs"], abs=0)
        assert [dict(m) for m in row["messages"]] == [{"role": "user", "content": row["prompt"]},
                                                      {"role": "assistant", "content": row["completion"]}]
