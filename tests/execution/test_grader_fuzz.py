"""No submission can choose an excluded outcome: the grader is fuzzed with many submission forms on every
built-in metric, and none of them yields ``infra_error``; a program that censors its own poor outcomes gains
nothing; an infra error that comes back on re-execution counts as the program's failure."""
from __future__ import annotations

import os
import stat
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from wmrl.execution.runner import _grade, default_grader, outcome
from wmrl.execution.sandbox import SandboxRun
from wmrl.execution.types import ExecutionRequest, ExecutionResult, ExecutionStatus
from wmrl.tasks.metrics import CODE_METRICS, METRICS, submission_columns
from wmrl.tasks.spec import Task

N_TEST = 30


def metric_task(root: Path, metric: str, task_type: str, seed: int = 0) -> Task:
    """A small task of ``task_type`` scored by ``metric``: public files, private answers, a 20-entry board."""
    rng = np.random.default_rng(seed)
    pub, priv = root / "public", root / "private"
    pub.mkdir(parents=True)
    priv.mkdir()
    classes = {"binary": ("0", "1"), "multiclass": ("a", "b", "c"), "regression": ()}[task_type]
    ids = np.arange(100, 100 + N_TEST)
    x = rng.normal(size=N_TEST).round(3)
    if task_type == "regression":
        y = (3 * x + rng.normal(size=N_TEST)).round(3)
        if metric == "rmsle":  # a logarithmic metric needs targets > -1
            y = np.abs(y)
    else:
        y = np.array(classes)[rng.integers(0, len(classes), N_TEST)]
        y[: len(classes)] = classes  # every class present
    pd.DataFrame({"id": ids, "x": x}).to_csv(pub / "test.csv", index=False)
    pd.DataFrame({"id": ids, "x": x, "y": y}).to_csv(pub / "train.csv", index=False)
    cols = submission_columns(task_type, metric, "id", "y", classes)
    kind = METRICS[metric].kind
    sample = {"id": ids}
    for c in cols[1:]:
        sample[c] = (1.0 / len(classes) if task_type == "multiclass" else 0.5) if kind == "proba" else (
            classes[0] if kind == "label" else 0.0)
    pd.DataFrame(sample)[cols].to_csv(pub / "sample_submission.csv", index=False)
    pd.DataFrame({"id": ids, "y": y}).to_csv(priv / "answers.csv", index=False)
    board = root / "leaderboard.csv"
    lower = METRICS[metric].lower_is_better
    scores = np.linspace(0.1, 2.0, 20) if lower else np.linspace(0.99, 0.3, 20)
    pd.DataFrame({"rank": np.arange(1, 21), "score": scores}).to_csv(board, index=False)
    for p in [root, pub, priv, *pub.iterdir(), *priv.iterdir(), board]:
        os.chmod(p, os.stat(p).st_mode | stat.S_IROTH | (stat.S_IXOTH if p.is_dir() else 0))
    return Task(id=f"fuzz-{metric}-{task_type}", type=task_type, metric=metric, lower_is_better=lower, target="y",
                id_column="id", root=root, public_dir=pub, answers_path=priv / "answers.csv",
                leaderboard_paths=(board,), time_limit_s=20.0, split="train", description="fuzz",
                failure_reward=0.0, classes=classes, n_train=N_TEST, n_test=N_TEST)


# Every metric wmrl computes (the code_* ones are computed by a benchmark's own code: tests/tasks/test_own_graders.py).
CASES = [(m, t) for m, info in METRICS.items() for t in info.task_types if m not in CODE_METRICS]


def submission_forms(task: Task, rng: np.random.Generator) -> dict[str, bytes]:
    """About 60 submissions: valid ones, then every kind of malformed, hostile or absurd file."""
    cols = submission_columns(task.type, task.metric, "id", "y", task.classes)
    sample = pd.read_csv(task.sample_submission_path, dtype={"id": str})
    ids = list(sample["id"])
    vcols = cols[1:]

    def rows(values, header=None, id_list=None) -> bytes:
        head = ",".join(header or cols)
        body = "".join(f"{i},{','.join(str(v) for v in vals)}\n" for i, vals in zip(id_list or ids, values))
        return (head + "\n" + body).encode("utf-8", "surrogatepass")

    n = len(ids)
    width = len(vcols)
    good = sample.to_csv(index=False).encode()
    weird_values = ["1" + "0" * 400, "-" + "9" * 400, "1e400", "-1e400", "inf", "-inf", "nan", "NaN", "", " ",
                    "True", "False", "0x1F", "1+2j", "[0.5]", "{}", "None", "null", "\u00e9", "\ud83d\ude00",
                    "1_000", "1,5", '"0.5"', "'0.5'", "5e-324", "1e308", "-0", "+0.5", "0.5.5", "\\N",
                    "a" * 2000, "9" * 5000, "1e-400"]
    forms = {"sample": good, "random-valid": rows(rng.random((n, width)).round(6).tolist())}
    for k, v in enumerate(weird_values):
        vals = [[v] * width if i == 1 else [0.5] * width for i in range(n)]
        forms[f"value-{k}"] = rows(vals)
        forms[f"all-{k}"] = rows([[v] * width] * n)
    forms.update({
        "empty": b"", "only-header": (",".join(cols) + "\n").encode(), "no-header": good.split(b"\n", 1)[1],
        "bom": b"\xef\xbb\xbf" + good, "crlf": good.replace(b"\n", b"\r\n"), "tabs": good.replace(b",", b"\t"),
        "semicolons": good.replace(b",", b";"), "latin1": good.replace(b"id", "\u00eed".encode("latin1")),
        "random-bytes": rng.integers(0, 256, 4096, dtype=np.uint8).tobytes(),
        "utf16": good.decode().encode("utf-16"), "nul": good[:10] + b"\0" + good[10:],
        "dup-header": good + good, "dup-ids": good + good.split(b"\n", 1)[1],
        "missing-ids": b"\n".join(good.split(b"\n")[:-5]) + b"\n",
        "extra-id": good + ("999999," + ",".join(["0.5"] * width) + "\n").encode(),
        "float-ids": rows([[0.5] * width] * n, id_list=[f"{i}.0" for i in ids]),
        "huge-ids": rows([[0.5] * width] * n, id_list=["1" + "0" * 400 + str(i) for i in range(n)]),
        "neg-ids": rows([[0.5] * width] * n, id_list=[f"-{i}" for i in ids]),
        "space-target": rows([[0.5] * (width + 1)] * n, header=cols + [" " + cols[-1]]),
        "wrong-case": rows([[0.5] * width] * n, header=[c.upper() for c in cols]),
        "extra-col": rows([[0.5] * (width + 1)] * n, header=cols + ["z"]),
        "missing-col": rows([[]] * n, header=cols[:1]),
        "wide-header": (",".join(cols + [f"c{i}" for i in range(200_000)]) + "\n").encode(),
        "wide-rows": rows([[0.5] * 50_000] * n),
        "ragged": rows([[0.5] * (width + (i % 3))] * 1 for i in range(n)),
        "unterminated-quote": good.replace(b"\n1", b'\n"1', 1) + b'"',
        "long-line": rows([["7" * 900_000] * width] + [[0.5] * width] * (n - 1)),
        "many-lines": good + b"\n" * 10_000,
        "negative": rows([[-0.5] * width] * n), "above-one": rows([[1.5] * width] * n),
        "zeros": rows([[0] * width] * n), "huge-floats": rows([[1e300] * width] * n),
        "tiny-floats": rows([[1e-300] * width] * n),
        "labels-as-floats": rows([[f"{c}.0" if task.classes else 1.0] for c in (task.classes * n)[:n]]) if width == 1
        else good,
        "unknown-label": rows([["zzz"] * width] * n),
        "quoted-commas": rows([['"0,5"'] * width] * n),
        "header-only-quotes": ('"' * 10_000 + "\n").encode(),
    })
    return forms


@pytest.mark.parametrize("metric, task_type", CASES)
def test_no_submission_form_yields_an_infra_error(tmp_path, metric, task_type):
    task = metric_task(tmp_path / "task", metric, task_type)
    rng = np.random.default_rng(0)
    forms = submission_forms(task, rng)
    assert len(forms) > 60
    seen = set()
    for name, data in forms.items():
        status, error, grade = _grade(task, data, default_grader)
        assert status in (ExecutionStatus.OK, ExecutionStatus.INVALID_SUBMISSION), (name, status, error)
        if status == ExecutionStatus.OK:
            assert np.isfinite(grade.score) and 0.0 <= grade.reward <= 1.0, (name, grade)
        else:
            assert error.startswith("invalid submission") and len(error) <= 500, (name, error)
        seen.add(status)
    assert seen == {ExecutionStatus.OK, ExecutionStatus.INVALID_SUBMISSION}


def test_the_wide_submission_is_refused_fast_and_small(tmp_path):
    """34 lines of 524,288 one-letter columns (a 34 MB file): refused before any parser reads it."""
    import time
    import tracemalloc

    task = metric_task(tmp_path / "task", "rmse", "regression")
    data = ("a," * 524_287 + "a\n").encode() * 34
    tracemalloc.start()
    t0 = time.perf_counter()
    status, error, _ = _grade(task, data, default_grader)
    took = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert status == ExecutionStatus.INVALID_SUBMISSION and "longer than" in error
    assert took < 2.0 and peak < 50 * 1024**2, (took, peak)


def _run(submission: bytes | None) -> SandboxRun:
    return SandboxRun(mode="bwrap", started=True, exit_code=0, submission=submission)


def test_self_censoring_programs_gain_nothing_in_the_evaluation_mean(tmp_path):
    """Six programs of varying quality; the censoring copies crash the grader (a 400-digit value, which used to
    raise OverflowError inside it) whenever their own score is poor. Their evaluation mean is the honest one's
    or lower, never above, and nothing is left out."""
    from wmrl.training.evaluation import summarize_eval

    task = metric_task(tmp_path / "task", "rmse", "regression")
    truth = pd.read_csv(task.answers_path)["y"].to_numpy()
    ids = pd.read_csv(task.sample_submission_path)["id"].to_numpy()
    rng = np.random.default_rng(1)
    honest, censoring = [], []
    for noise in (0.01, 0.3, 1.0, 2.0, 4.0, 8.0):
        pred = truth + rng.normal(scale=noise, size=truth.size)
        sub = pd.DataFrame({"id": ids, "y": pred.round(4)}).to_csv(index=False).encode()
        r = outcome(ExecutionRequest(task=task, program=f"# noise {noise}"), _run(sub))
        honest.append(r)
        if noise >= 1.0:  # the program's own CV says it is poor: make the grader fail
            lines = sub.decode().split("\n")
            lines[1] = lines[1].split(",")[0] + "," + "1" + "0" * 400
            sub = "\n".join(lines).encode()
        censoring.append(outcome(ExecutionRequest(task=task, program=f"# noise {noise}, censoring"), _run(sub)))
    assert not any(r.is_infra_error for r in censoring)
    h = summarize_eval([task.id] * 6, honest, step=0, split="train")
    c = summarize_eval([task.id] * 6, censoring, step=0, split="train")
    assert c["n_infra_errors"] == 0 and c["mean_percentile"] <= h["mean_percentile"]
    assert c["valid_rate"] < 1.0 and not c["infra_alarm"]


def test_an_infra_error_that_comes_back_counts_as_the_programs_failure(tmp_path):
    from wmrl.execution.pool import FutureExecutor, recheck_infra_error

    task = metric_task(tmp_path / "task", "rmse", "regression")
    req = ExecutionRequest(task=task, program="x", request_id="r1")

    def res(status, reward, err="", cpu=1.0):
        return ExecutionResult("r1", task.id, status, None, reward, 2.0, cpu, 0, "", "", "h", error=err)

    passing = recheck_infra_error(req, res(ExecutionStatus.INFRA_ERROR, None, "flaky"), res(ExecutionStatus.OK, 0.7))
    assert passing.status == ExecutionStatus.OK and passing.reward == 0.7 and passing.cpu_s == 2.0
    again = recheck_infra_error(req, res(ExecutionStatus.INFRA_ERROR, None, "boom"),
                                res(ExecutionStatus.INFRA_ERROR, None, "boom"))
    assert again.status == ExecutionStatus.RUNTIME_ERROR and again.reward == task.failure_reward
    assert "reproduced" in again.error and not again.is_infra_error and again.wall_s == 4.0

    class Flaky(FutureExecutor):  # the shared executor machinery with a backend that fails as told
        def __init__(self, outcomes):
            self._init_futures()
            self.log = None
            self.outcomes = list(outcomes)

        def _dispatch(self, fut, request):  # called under the executor's lock: drive on a thread of its own
            import threading

            threading.Thread(target=self._drive, args=(fut, request)).start()

        def _run(self, fut, request):
            out = self.outcomes.pop(0)
            if isinstance(out, Exception):
                raise out
            return out

        def _shutdown(self, running):
            pass

    ex = Flaky([RuntimeError("driver bug"), res(ExecutionStatus.OK, 0.4)])
    assert ex.run_batch([req])[0].status == ExecutionStatus.OK and not ex.outcomes
    ex = Flaky([RuntimeError("driver bug"), RuntimeError("driver bug")])
    assert ex.run_batch([req])[0].status == ExecutionStatus.RUNTIME_ERROR
    ex = Flaky([RuntimeError("driver bug")])
    ex.recheck_infra = False
    assert ex.run_batch([req])[0].is_infra_error


def test_a_reference_probe_failure_is_an_infra_error_and_a_success_is_cached(tmp_path):
    from wmrl.execution.runner import grader_fault

    task = metric_task(tmp_path / "task", "mae", "regression")
    calls = []

    def grader(t, path):
        calls.append(path.name)
        if path.name == "sample_submission.csv":
            return SimpleNamespace(score=1.0, reward=0.5, medal=None, above_median=False)
        raise ArithmeticError("overflow in the metric")

    assert grader_fault(task, grader) == "" and grader_fault(task, grader) == ""
    assert calls == ["sample_submission.csv"]
    task.answers_path.unlink()  # the task is broken now: no submission is to blame
    assert "FileNotFoundError" in grader_fault(task, default_grader)
    sub = task.sample_submission_path.read_bytes()
    r = outcome(ExecutionRequest(task=task, program="x"), _run(sub))
    assert r.is_infra_error and r.reward is None and "reference submission" in r.error


def test_a_device_is_no_submission_file(tmp_path):
    from wmrl.tasks.grading import grade_submission
    from wmrl.tasks.spec import InvalidSubmission

    task = metric_task(tmp_path / "task", "rmse", "regression")
    with pytest.raises(InvalidSubmission, match="not a regular file"):
        grade_submission(task, Path("/dev/zero"))


def test_an_unreadable_submission_is_blamed_only_when_the_grader_reads_the_reference(tmp_path):
    from wmrl.tasks.spec import UnreadableSubmission

    task = metric_task(tmp_path / "task", "mae", "regression")

    def broken(t, path):  # an unexpected parse failure on every file: the grader's, not the submission's
        raise UnreadableSubmission("the submission could not be read (TypeError: ...)")

    assert outcome(ExecutionRequest(task=task, program="x"),
                   _run(b"id,y\n")).status == ExecutionStatus.INVALID_SUBMISSION
    r = outcome(ExecutionRequest(task=task, program="x"), _run(b"id,y\n"), grader=broken)
    assert r.is_infra_error and "reference submission" in r.error
