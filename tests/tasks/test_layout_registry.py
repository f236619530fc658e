"""The layout registry (wmrl.tasks.layouts.LAYOUTS): each layout's fixture writer writes a folder that its own
``detect`` (or, for DSBench, its ``find`` on the release) accepts and its own ``load`` reads, no other layout
claims it first, and the loader's refusal names every layout."""
from __future__ import annotations

from pathlib import Path

import pytest

from wmrl.tasks.fixtures import FIXTURES, build_benchmark_fixtures
from wmrl.tasks.layouts import all_layouts, layout
from wmrl.tasks.loader import TaskFormatError, detect_layout, load_task

ONE_EACH = ("dojo-titanicp", "mleb-attrition", "dsb-concrete")


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    out = tmp_path_factory.mktemp("registry")
    return out, build_benchmark_fixtures(out, ids=ONE_EACH)


def test_registry_names_are_unique_and_every_fixture_has_a_writer():
    names = [lay.name for lay in all_layouts()]
    assert names == ["wmrl", "mlebench", "mledojo", "dsbench"]  # the order a folder is tried in
    assert {f.benchmark for f in FIXTURES} <= {lay.name for lay in all_layouts() if lay.fixture is not None}
    assert {lay.package for lay in all_layouts() if lay.package} == {"mlebench", "mledojo"}
    assert all(lay.no_data is not None for lay in all_layouts() if lay.package)
    with pytest.raises(KeyError, match="unknown task layout 'kaggle'; registered: wmrl, mlebench"):
        layout("kaggle")


def test_each_fixture_is_claimed_and_read_by_its_own_layout(made):
    out, folders = made
    assert sorted(folders) == sorted(ONE_EACH)
    search = [(out / "mle-bench").resolve()]  # MLE-bench's package metadata lies apart from its data folders
    by_id = {f.id: f.benchmark for f in FIXTURES}
    for fid, folder in folders.items():
        lay = layout(by_id[fid])
        claimed = [other.name for other in all_layouts() if other.detect(folder)]
        assert claimed[0] == lay.name, (fid, claimed)
        if lay.self_describing:
            assert lay.find(folder) == [folder] and detect_layout(folder) == lay.name
        else:  # DSBench: found through its release's data_modeling folder, not by its own files
            home = folder.parents[2]
            assert lay.find(folder) is None and detect_layout(folder) is None
            assert folder in lay.find(home)
        task = lay.load(folder.resolve(), search)
        assert task.layout == lay.name and task.id == fid
        assert load_task(folder, search=search) == task


def test_a_folder_of_no_layout_is_refused_naming_every_layout(tmp_path):
    (tmp_path / "data").mkdir()
    with pytest.raises(TaskFormatError) as e:
        load_task(tmp_path)
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path.resolve()} is not a task folder: expected ")
    for lay in all_layouts():
        assert f"{lay.expects} ({lay.title})" in msg
    assert all(lay.find(tmp_path) is None for lay in all_layouts())
