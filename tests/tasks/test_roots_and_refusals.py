"""How wmrl reads benchmark folders under task roots: `wmrl tasks check` fails on refused tasks, MLE-bench's
default data folder (hidden, ``~/.cache/mle-bench/data``) is found under a parent root, and every refusal that
asks for a hints file names the very file the loader then reads."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from wmrl.cli import app
from wmrl.tasks.fixtures import build_benchmark_fixtures
from wmrl.tasks.loader import TaskFormatError, discover, load_task


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory) -> Path:
    """The six benchmark-layout fixtures, built once; each test copies what it changes."""
    out = tmp_path_factory.mktemp("fixtures")
    build_benchmark_fixtures(out)
    return out


def _flat(text: str) -> str:
    return " ".join(text.split())


def _hints_path(message: str) -> Path:
    """The hints file a refusal message names (``... the hints file <path>``)."""
    m = re.search(r"the hints file (/\S+?\.yaml)", message)
    assert m, message
    return Path(m.group(1))


# --- wmrl tasks check over the whole roots -------------------------------------------------------------------

def test_check_without_ids_fails_on_a_refused_task_and_names_it(fixtures, tmp_path):
    dojo = tmp_path / "mle-dojo"
    shutil.copytree(fixtures / "mle-dojo", dojo)
    runner = CliRunner()
    r = runner.invoke(app, ["tasks", "check", "--root", str(dojo)])
    assert r.exit_code == 0, r.output
    assert _flat(r.output) == "dojo-houseprices: ok dojo-titanicp: ok"
    # no metric code left for one competition: refused (cannot be graded), not silently dropped
    (dojo / "mledojo" / "competitions" / "dojo-houseprices" / "utils" / "metric.py").unlink()
    r = runner.invoke(app, ["tasks", "check", "--root", str(dojo)])
    out = _flat(r.output)
    assert r.exit_code == 1, r.output
    assert "dojo-titanicp: ok" in out
    assert "refused dojo-houseprices: task 'dojo-houseprices': no metric found" in out
    assert "1 task(s) under the roots were refused (cannot be graded): dojo-houseprices" in out
    assert f"wmrl tasks list --root {dojo}" in out and "--allow-refused" in out
    r = runner.invoke(app, ["tasks", "check", "--root", str(dojo), "--allow-refused"])
    assert r.exit_code == 0, r.output
    assert "refused dojo-houseprices" in _flat(r.output) and "not counted as a failure" in _flat(r.output)
    r = runner.invoke(app, ["tasks", "check", "dojo-titanicp", "--root", str(dojo), "--allow-refused"])
    assert r.exit_code == 2 and "goes with checking every task under the roots (no task ids)" in _flat(r.output)


# --- MLE-bench's default data folder under a parent root -----------------------------------------------------

@pytest.fixture
def fake_home(fixtures, tmp_path, monkeypatch) -> Path:
    """A home folder as MLE-bench leaves it: the checkout ``~/mle-bench`` (package metadata) and the data that
    ``mlebench prepare`` wrote to its default ``~/.cache/mle-bench/data/<id>/prepared/{public,private}``."""
    home = tmp_path / "home"
    shutil.copytree(fixtures / "mle-bench", home / "mle-bench")
    shutil.copytree(fixtures / "mle-bench-data", home / ".cache" / "mle-bench" / "data")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    return home


MLEB = {"mleb-attrition", "mleb-seattle-weather"}


def test_mlebench_default_data_folder_is_found_under_a_parent_root(fake_home):
    data = fake_home / ".cache" / "mle-bench" / "data"
    assert (data / "mleb-attrition" / "prepared" / "public" / "train.csv").is_file()
    assert (data / "mleb-attrition" / "prepared" / "private" / "test.csv").is_file()
    checkout = fake_home / "mle-bench"
    for roots in ([fake_home], [fake_home / ".cache", checkout], [fake_home / ".cache" / "mle-bench", checkout],
                  [data, checkout], [fake_home, data]):  # the last two overlap: each task is found once
        d = discover(roots, check=False)
        assert set(d.tasks) == MLEB, (roots, d.summary())
        assert not d.refused and not d.skipped, (roots, d.summary())
        assert {Path(t.root).parent for t in d.tasks.values()} == {data.resolve()}


def test_data_outside_the_roots_or_in_a_skipped_hidden_folder_is_named_not_prepare(fake_home, tmp_path):
    data = fake_home / ".cache" / "mle-bench" / "data"
    # only the checkout as a root: the data lies in MLE-bench's default folder, which the message names
    d = discover([fake_home / "mle-bench"], check=False)
    assert not d.tasks
    assert "run mlebench prepare" not in d.summary()
    assert f"prepared data lies in MLE-bench's default data folder {data}" in d.summary()
    assert f"add {data} as a root" in d.summary()
    # the data in another hidden folder, which discovery does not enter below a root: said so, with the fix
    other = fake_home / ".mle-data"
    shutil.move(str(data), str(other))
    d = discover([fake_home], check=False)
    text = d.summary()
    assert not d.tasks and "run mlebench prepare" not in text
    assert f"hidden folder {other.resolve()} holds task folders (mleb-attrition, mleb-seattle-weather)" in text
    assert f"give it as a root (--root {other.resolve()}" in text
    assert f"prepared data lies in the hidden folder {other.resolve()}, which discovery skips" in text
    assert set(discover([other, fake_home], check=False).tasks) == MLEB  # given as a root, it is searched
    # nothing prepared anywhere: the prepare hint, with where mlebench prepare writes
    shutil.rmtree(other)
    text = discover([fake_home], check=False).summary()
    assert f"run mlebench prepare -c <id>, which writes to {data} unless given --data-dir" in text


def test_version_control_and_caches_are_still_skipped(fixtures, tmp_path):
    root = tmp_path / "proj"
    shutil.copytree(fixtures / "mle-dojo", root / "mle-dojo")
    for pruned in (".git", ".venv", "__pycache__"):  # a copy there would be a second task with the same id
        shutil.copytree(fixtures / "mle-dojo" / "data" / "prepared" / "dojo-titanicp",
                        root / pruned / "dojo-titanicp")
    d = discover([root], check=False)
    assert set(d.tasks) == {"dojo-titanicp", "dojo-houseprices"} and not d.skipped, d.summary()


# --- refusals name the hints file the loader reads -----------------------------------------------------------

def _refused_then_loads(folder: Path, hint: dict, search: tuple[Path, ...] = ()) -> Path:
    """Load ``folder`` (refused: no metric), write ``hint`` to the hints file its message names, load again."""
    with pytest.raises(TaskFormatError) as e:
        load_task(folder, search=search)
    path = _hints_path(str(e.value))
    assert not path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(hint))
    task = load_task(folder, search=search)
    assert task.hints_file == path
    return path


def test_dsbench_refusal_names_data_modeling_data_wmrl(fixtures, tmp_path):
    shutil.copytree(fixtures / "dsbench", tmp_path / "dsbench")
    home = tmp_path / "dsbench" / "data_modeling"
    (home / "evaluation" / "dsb-concrete_eval.py").unlink()  # no metric code, no hint: refused
    folder = home / "data" / "data_resplit" / "dsb-concrete"
    path = _refused_then_loads(folder, {"metric": "rmse"})
    assert path == home / "data" / "wmrl" / "dsb-concrete.yaml"
    task = load_task(folder)
    assert (task.metric, task.metric_source, task.reward_kind) == ("rmse", "wmrl/dsb-concrete.yaml metric", "rpg")
    # through discovery too: the refusal reason names the same file
    path.unlink()
    d = discover([tmp_path / "dsbench"], check=False)
    (tid, _, why), = d.refused
    assert tid == "dsb-concrete" and _hints_path(why) == path


def test_mledojo_refusal_names_the_data_folders_wmrl_yaml(fixtures, tmp_path):
    shutil.copytree(fixtures / "mle-dojo", tmp_path / "mle-dojo")
    (tmp_path / "mle-dojo" / "mledojo" / "competitions" / "dojo-titanicp" / "utils" / "metric.py").unlink()
    folder = tmp_path / "mle-dojo" / "data" / "prepared" / "dojo-titanicp"
    assert _refused_then_loads(folder, {"metric": "accuracy"}) == folder / "wmrl.yaml"
    assert load_task(folder).metric == "accuracy"


def test_mlebench_refusals_name_the_data_folders_wmrl_yaml(fixtures, tmp_path):
    shutil.copytree(fixtures / "mle-bench", tmp_path / "mle-bench")
    shutil.copytree(fixtures / "mle-bench-data", tmp_path / "mle-bench-data")
    comp = tmp_path / "mle-bench" / "mlebench" / "competitions" / "mleb-attrition"
    folder = tmp_path / "mle-bench-data" / "mleb-attrition"
    (comp / "grade.py").unlink()
    config = yaml.safe_load((comp / "config.yaml").read_text())
    config["grader"]["name"] = "custom"  # no grader name wmrl reads and no grade.py: no metric
    (comp / "config.yaml").write_text(yaml.safe_dump(config))
    checkout = (tmp_path / "mle-bench",)
    path = _refused_then_loads(folder, {"metric": "log_loss"}, checkout)
    assert path == folder / "wmrl.yaml" and not (comp / "wmrl.yaml").exists()
    # a grader wmrl does not know, and no grade.py: the message names the same file
    path.unlink()
    config["grader"]["name"] = "some-custom-score"
    (comp / "config.yaml").write_text(yaml.safe_dump(config))
    assert _refused_then_loads(folder, {"metric": "log_loss"}, checkout) == folder / "wmrl.yaml"
    assert load_task(folder, search=checkout).metric == "log_loss"
