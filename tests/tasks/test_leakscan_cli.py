"""``wmrl tasks check --copies-in DIR`` fails on a planted copy of a task's test rows (scans only DIR)."""
from __future__ import annotations

import pandas as pd
from typer.testing import CliRunner

from wmrl.cli import app


def test_tasks_check_fails_on_a_planted_copy(wmrl_binary_task, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    test = pd.read_csv(wmrl_binary_task / "public" / "test.csv")
    test.drop(columns="id").to_csv(site / "copy.tsv", sep="\t", index=False)
    r = CliRunner().invoke(app, ["tasks", "check", str(wmrl_binary_task), "--copies-in", str(site)])
    assert r.exit_code == 1, r.output
    assert f"toy-binary: answer_copy: {site / 'copy.tsv'} holds 20 of the 20 test rows (100%)" in r.output
    clean = tmp_path / "clean"
    clean.mkdir()
    (clean / "numbers.csv").write_text("a,b\n" + "".join(f"{i},{i * 7 % 13}\n" for i in range(500)))
    r = CliRunner().invoke(app, ["tasks", "check", str(wmrl_binary_task), "--copies-in", str(clean)])
    assert r.exit_code == 0 and "toy-binary: ok" in r.output, r.output


def test_mask_lists_the_copy_and_the_sandbox_hides_it(wmrl_binary_task, tmp_path):
    from wmrl.execution.masks import read_masks

    site = tmp_path / "site"
    site.mkdir()
    pd.read_csv(wmrl_binary_task / "public" / "test.csv").drop(columns="id").to_csv(site / "copy.csv", index=False)
    r = CliRunner().invoke(app, ["tasks", "check", str(wmrl_binary_task), "--copies-in", str(site), "--mask"])
    assert r.exit_code == 1 and "the sandbox masks them" in r.output, r.output
    assert read_masks(wmrl_binary_task) == (str(site / "copy.csv"),)
