"""A benchmark's own metric code: which metric it computes (read statically) and its score (run in a child).

Three conventions, one per benchmark (read from their public repositories, not copied):

* **MLE-Dojo** ``mledojo/competitions/<id>/utils/metric.py``: a subclass of
  ``mledojo.metrics.base.CompetitionMetrics`` whose ``__init__`` defaults give ``higher_is_better``
  and whose ``evaluate(y_true, y_pred)`` takes the answers and the submission as DataFrames.
* **MLE-bench** ``mlebench/competitions/<id>/grade.py``: ``grade(submission, answers) -> float``.
* **DSBench** ``data_modeling/evaluation/<id>_eval.py``: a script run as
  ``python <id>_eval.py --answer_file A --predict_file P --path OUT --name N`` that writes its score to
  ``OUT/N/result.txt``.

The code is **never imported into the driver**: :func:`run_metric_code` runs it in a child process, forked
for that one run from a long-lived interpreter (``python -I -B``: no user site, no bytecode written next to the
code) that has only pandas, NumPy, SciPy and scikit-learn imported (importing them took most of a fresh
interpreter's 1-7 s per run); the child runs in an empty temporary working folder, in a session of its own,
with an address-space limit (:data:`METRIC_MEMORY_BYTES`), a CPU-time limit and a wall-clock timeout
(:data:`METRIC_TIMEOUT_S`), and nothing written into the benchmark's checkout. What the code does to its
interpreter (a module patched, ``os._exit``, a crash) ends with its child: neither the driver nor the next run
sees it; a long-lived interpreter that dies is started again. The benchmark's
own helpers are importable: when the code lies in a checkout (``.../mlebench/competitions/<id>/grade.py``,
``.../mledojo/competitions/<id>/utils/metric.py``), the checkout's root goes first on ``sys.path`` and the code
is imported by its module name there (``mlebench.competitions.<id>.grade``, as MLE-bench imports it, so its
relative imports resolve), so ``mlebench.competitions.utils`` or ``mledojo.metrics.base`` are the benchmark's
own; an installed package
comes next; only when neither exists does a minimal stand-in for the two base modules that every metric
file imports (``mledojo.metrics.base``, ``mlebench.grade_helpers``) come last. A module the code needs
that none of these provide fails the run with its name (:class:`MetricCodeError`).

:func:`recognise_metric` reads the code without running it (``ast``) and names the wmrl metric it
computes, or ``None`` when it cannot tell; wmrl never guesses beyond that.
"""
from __future__ import annotations

import ast
import json
import os
import selectors
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

#: Address-space limit of the child that runs a benchmark's metric code, bytes.
METRIC_MEMORY_BYTES = 4 * 1024**3
#: Wall-clock limit of one metric-code run, seconds (the CPU-time limit is the same).
METRIC_TIMEOUT_S = 120.0

#: scikit-learn functions (or names in the code) -> the wmrl metric they compute.
_SKLEARN_NAMES = {
    "roc_auc_score": "roc_auc", "log_loss": "log_loss", "accuracy_score": "accuracy",
    "mean_absolute_error": "mae", "r2_score": "r2", "root_mean_squared_error": "rmse",
    "root_mean_squared_log_error": "rmsle",
}


class MetricCodeError(RuntimeError):
    """The benchmark's metric code failed, timed out or printed no score; the message says which."""


@dataclass(frozen=True)
class CodeScore:
    """What one run of a benchmark's metric code returned.

    Attributes:
        score: the metric value the code computed.
        higher_is_better: the direction the code declares (MLE-Dojo's ``higher_is_better``), or None.
    """

    score: float
    higher_is_better: bool | None = None


def recognise_metric(path: Path) -> str | None:
    """The wmrl metric name that the benchmark metric code at ``path`` computes, read with ``ast``
    (the code is not run), or ``None`` when it computes none or several that wmrl knows.

    Recognised: scikit-learn's ``roc_auc_score`` (``multi_class=`` -> ``roc_auc_ovr``), ``log_loss``,
    ``accuracy_score``, ``f1_score(average="macro")``, ``mean_absolute_error``, ``r2_score``,
    ``root_mean_squared_error`` or ``mean_squared_error`` with ``squared=False`` or a square root
    (``rmse``), ``root_mean_squared_log_error`` or ``mean_squared_log_error`` with a square root
    (``rmsle``), ``cohen_kappa_score(weights="quadratic")`` (``qwk``), and an element-wise comparison
    followed by ``.mean()`` (accuracy, DSBench's style). Recognition only chooses the fast path: the
    grader uses wmrl's metric for a task only where it agrees with the code on probe submissions
    (:func:`wmrl.tasks.grading.fast_path`).

    Raises:
        OSError: the file cannot be read. SyntaxError: it is not Python.
    """
    tree = ast.parse(Path(path).read_text(encoding="utf-8", errors="replace"))
    found: set[str] = set()
    has_sqrt = False
    mse = False
    msle = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            if name in _SKLEARN_NAMES:
                found.add("roc_auc_ovr" if name == "roc_auc_score" and "multi_class" in kw else _SKLEARN_NAMES[name])
            elif name == "f1_score":
                avg = kw.get("average")
                if isinstance(avg, ast.Constant) and avg.value == "macro":
                    found.add("macro_f1")
                else:
                    found.add("f1_other")
            elif name == "mean_squared_error":
                sq = kw.get("squared")
                if isinstance(sq, ast.Constant) and sq.value is False:
                    found.add("rmse")
                else:
                    mse = True
            elif name == "mean_squared_log_error":
                msle = True
            elif name == "cohen_kappa_score":
                w = kw.get("weights")
                found.add("qwk" if isinstance(w, ast.Constant) and w.value == "quadratic" else "kappa_other")
            elif name == "sqrt":
                has_sqrt = True
            elif name == "mean" and isinstance(fn, ast.Attribute):
                inner = fn.value
                if isinstance(inner, ast.Compare) and len(inner.ops) == 1 and isinstance(inner.ops[0], ast.Eq):
                    found.add("accuracy")
    if mse:
        found.add("rmse" if has_sqrt else "mse")
    if msle:
        found.add("rmsle" if has_sqrt else "msle")
    known = {"roc_auc", "roc_auc_ovr", "log_loss", "accuracy", "macro_f1", "rmse", "mae", "r2", "rmsle", "qwk"}
    names = found & known
    if len(names) != 1 or found - known:
        return None
    return names.pop()


def declared_higher_is_better(path: Path) -> bool | None:
    """The default of ``higher_is_better`` in the ``__init__`` of an MLE-Dojo metric class at ``path``, read
    with ``ast`` (the code is not run); ``None`` when the file declares none or several.

    Raises:
        OSError: the file cannot be read. SyntaxError: it is not Python.
    """
    tree = ast.parse(Path(path).read_text(encoding="utf-8", errors="replace"))
    found: set[bool] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            args = node.args.args[len(node.args.args) - len(node.args.defaults):]
            for a, d in zip(args, node.args.defaults):
                if a.arg == "higher_is_better" and isinstance(d, ast.Constant) and isinstance(d.value, bool):
                    found.add(d.value)
    return found.pop() if len(found) == 1 else None


def checkout_root(code: Path) -> Path | None:
    """The root of the benchmark checkout that holds ``code`` (the folder above its ``mlebench`` or
    ``mledojo`` package), or ``None`` when the code does not lie in one."""
    code = Path(code).resolve()
    for parent in code.parents:
        if parent.name in ("mlebench", "mledojo") and (parent / "__init__.py").is_file() \
                and (parent / "competitions").is_dir():
            return parent.parent
    return None


_SHIM_FILES = {
    "mledojo/__init__.py": "",
    "mledojo/metrics/__init__.py": "",
    "mledojo/metrics/base.py": (
        "class InvalidSubmissionError(Exception):\n    pass\n\n\n"
        "class CompetitionMetrics:\n"
        "    def __init__(self, higher_is_better=True):\n        self.higher_is_better = higher_is_better\n\n"
        "    def evaluate(self, y_true, y_pred):\n        raise NotImplementedError\n\n"
        "    def validate_submission(self, submission, ground_truth):\n        return 'Submission is valid.'\n"),
    "mlebench/__init__.py": "",
    "mlebench/grade_helpers.py": "class InvalidSubmissionError(Exception):\n    pass\n",
}

# The child's program: argv = kind, code, answers, submission. Prints one JSON line.
_RUNNER = r'''
import importlib.util, inspect, json, sys
kind, code, answers, submission, shim, checkout = sys.argv[1:7]
if checkout:
    sys.path.insert(0, checkout)
sys.path.append(shim)
import pandas as pd
def load(path, name):
    if checkout:  # as the benchmark imports it, so that its relative imports resolve
        import os
        rel = os.path.relpath(os.path.splitext(path)[0], checkout)
        return importlib.import_module(".".join(rel.split(os.sep)))
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
if kind == "mledojo":
    from mledojo.metrics.base import CompetitionMetrics
    mod = load(code, "wmrl_bench_metric")
    classes = [c for _, c in inspect.getmembers(mod, inspect.isclass)
               if issubclass(c, CompetitionMetrics) and c is not CompetitionMetrics and c.__module__ == mod.__name__]
    if len(classes) != 1:
        raise SystemExit(f"expected one CompetitionMetrics subclass in {code}, found {len(classes)}")
    m = classes[0]()
    y_true, y_pred = pd.read_csv(answers), pd.read_csv(submission)
    m.validate_submission(y_pred.copy(), y_true.copy())
    score = m.evaluate(y_true, y_pred)
    hib = getattr(m, "higher_is_better", None)
elif kind == "mlebench":
    mod = load(code, "wmrl_bench_grade")
    score = mod.grade(pd.read_csv(submission), pd.read_csv(answers))
    hib = None
else:
    raise SystemExit(f"unknown kind {kind}")
print(json.dumps({"score": float(score), "higher_is_better": None if hib is None else bool(hib)}))
'''


# The long-lived interpreter: one JSON request a line on stdin, one JSON reply a line on stdout. Each request is
# run in a child forked for it (own session, limits, working folder, stdout/stderr files); the reply gives the
# child's exit status as subprocess does (negative: the signal) and whether it ran past its wall-clock limit.
_SERVER = r'''
import json, os, resource, runpy, signal, sys, time, traceback
import numpy, pandas
for _m in ("scipy.stats", "sklearn.metrics"):
    try:
        __import__(_m)
    except Exception:
        pass
reply = os.fdopen(os.dup(1), "w")
def child(req):
    os.setsid()
    mem, cpu = req["memory_bytes"], int(req["timeout_s"]) + 1
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    os.chdir(req["cwd"])
    os.environ["HOME"] = req["cwd"]
    for fd, name in ((1, "stdout"), (2, "stderr")):
        f = os.open(req[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(f, fd)
        os.close(f)
    n = os.open(os.devnull, os.O_RDONLY)
    os.dup2(n, 0)
    sys.stdin = open(0)
    sys.argv = list(req["argv"])
    code = 0
    try:
        if req["script"]:
            runpy.run_path(req["script"], run_name="__main__")
        else:
            exec(compile(req["program"], "<runner>", "exec"), {"__name__": "__main__"})
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)
for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        try:
            child(req)
        finally:
            os._exit(1)
    deadline = time.monotonic() + req["timeout_s"]
    timed_out = False
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            timed_out = True
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            _, status = os.waitpid(pid, 0)
            break
        time.sleep(0.005)
    try:
        os.killpg(pid, signal.SIGKILL)  # whatever the code left running in its session
    except OSError:
        pass
    rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    reply.write(json.dumps({"rc": rc, "timed_out": timed_out}) + "\n")
    reply.flush()
'''

#: Seconds the driver waits for the long-lived interpreter beyond a run's own wall-clock limit before it stops
#: that interpreter (and so the run) and starts a new one for the next run.
_SERVER_GRACE_S = 60.0


class _MetricServer:
    """The long-lived interpreter that forks one child per metric-code run (module docstring); one per driver
    process, started on first use, requests sent one at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-B", "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, text=True, cwd="/", env=_child_env(), start_new_session=True)
        return self._proc

    def _stop(self) -> None:
        if self._proc is not None:
            try:
                os.killpg(self._proc.pid, 9)
            except OSError:
                pass
            self._proc.wait()
            self._proc = None

    def run(self, req: dict) -> dict:
        """Send one request, return its reply (``rc``, ``timed_out``); the reply is ``{"rc": None, ...}``
        when the interpreter died or did not answer within the run's limit plus :data:`_SERVER_GRACE_S`."""
        with self._lock:
            for _attempt in (0, 1):
                proc = self._start()
                try:
                    assert proc.stdin is not None and proc.stdout is not None
                    proc.stdin.write(json.dumps(req) + "\n")
                    proc.stdin.flush()
                except OSError:
                    self._stop()
                    continue  # it died between runs: start another and send the run again
                line = _read_line(proc, req["timeout_s"] + _SERVER_GRACE_S)
                if line:
                    return json.loads(line)
                timed_out = proc.poll() is None
                self._stop()
                return {"rc": None, "timed_out": timed_out}
            return {"rc": None, "timed_out": False}


def _read_line(proc: subprocess.Popen[str], timeout_s: float) -> str:
    """The next line of ``proc``'s stdout, or "" at its end or after ``timeout_s`` seconds."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout_s):
            return ""
    return proc.stdout.readline()


def _child_env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1",
            "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "LC_ALL": "C.UTF-8"}


_SERVER_PROCESS = _MetricServer()


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _shim_dir(tmp: Path) -> Path:
    root = tmp / "shim"
    for rel, text in _SHIM_FILES.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def run_metric_code(kind: str, code: Path, answers: Path, submission: Path, *,
                    timeout_s: float = METRIC_TIMEOUT_S, memory_bytes: int = METRIC_MEMORY_BYTES) -> CodeScore:
    """Score ``submission`` against ``answers`` with a benchmark's own metric code, in a child process.

    Args:
        kind: ``mledojo`` (``utils/metric.py``), ``mlebench`` (``grade.py``) or ``dsbench`` (``<id>_eval.py``).
        code: the metric code file.
        answers, submission: CSV files.
        timeout_s: wall-clock and CPU-time limit, seconds.
        memory_bytes: address-space limit of the child, bytes.

    Returns:
        :class:`CodeScore` (the score and, for MLE-Dojo, the declared direction).

    Raises:
        MetricCodeError: the code failed (its last error line is in the message), ran past the limits,
            or wrote no number.
        ValueError: an unknown ``kind``.
    """
    if kind not in ("mledojo", "mlebench", "dsbench"):
        raise ValueError(f"unknown metric code kind {kind!r}; use mledojo, mlebench or dsbench")
    code, answers, submission = Path(code).resolve(), Path(answers).resolve(), Path(submission).resolve()
    with tempfile.TemporaryDirectory(prefix="wmrl-metric-") as td:
        tmp = Path(td)
        if kind == "dsbench":
            argv = [str(code), "--answer_file", str(answers), "--predict_file", str(submission),
                    "--path", str(tmp / "out"), "--name", "task"]
            (tmp / "out" / "task").mkdir(parents=True)
        else:
            root = checkout_root(code)
            argv = ["-c", kind, str(code), str(answers), str(submission), str(_shim_dir(tmp)),
                    "" if root is None else str(root)]
        (tmp / "work").mkdir()
        rep = _SERVER_PROCESS.run({
            "argv": argv, "script": str(code) if kind == "dsbench" else "", "program": _RUNNER,
            "cwd": str(tmp / "work"), "stdout": str(tmp / "stdout"), "stderr": str(tmp / "stderr"),
            "timeout_s": float(timeout_s), "memory_bytes": int(memory_bytes)})
        if rep["timed_out"]:
            raise MetricCodeError(f"metric code {code} ran longer than {timeout_s:g} s; it was stopped")
        if rep["rc"] is None:
            raise MetricCodeError(f"metric code {code}: the interpreter that runs it ended without a result")
        proc = subprocess.CompletedProcess(argv, rep["rc"], _read(tmp / "stdout"), _read(tmp / "stderr"))
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
            if "ModuleNotFoundError" in last:
                raise MetricCodeError(f"metric code {code} needs a module that is not installed ({last[:200]}); "
                                      "install it (for the benchmark's own package: pip install -e its checkout)")
            raise MetricCodeError(f"metric code {code} failed: {last[:300]}")
        if kind == "dsbench":
            out = tmp / "out" / "task" / "result.txt"
            if not out.is_file():
                raise MetricCodeError(f"metric code {code} wrote no result.txt")
            try:
                return CodeScore(float(out.read_text().strip()))
            except ValueError:
                raise MetricCodeError(f"metric code {code} wrote {out.read_text()[:40]!r}, not a number") from None
        lines = [ln for ln in proc.stdout.strip().splitlines() if ln.startswith("{")]
        if not lines:
            raise MetricCodeError(f"metric code {code} printed no score")
        rec = json.loads(lines[-1])
        return CodeScore(float(rec["score"]), rec.get("higher_is_better"))
