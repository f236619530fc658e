"""Harness-made validation splits: a *view* of a task whose one execution yields a validation score too.

A competitor sees a validation score (on data it held out itself), never the test score. To give a
program the same feedback without a second run, :func:`validation_view` builds, once per task, split
and seed, a view folder::

    <cache>/<task id>-<hash>/public/train.csv              train.csv minus the held-out rows (train')
    <cache>/<task id>-<hash>/public/test.csv               held-out rows' features + the real test rows,
                                                           shuffled, under fresh ids
    <cache>/<task id>-<hash>/public/sample_submission.csv  the original format, the fresh ids
    <cache>/<task id>-<hash>/public/...                    every other public file, copied
    <cache>/<task id>-<hash>/private/idmap.csv             view_id, part (val|test), original_id
    <cache>/<task id>-<hash>/private/val_answers.csv       the held-out rows' targets under view ids
    <cache>/<task id>-<hash>/view.json                     manifest (written last; marks the view complete)

and returns the task with ``public_dir`` pointing at the view's ``public/`` and ``validation`` set
(:class:`~wmrl.tasks.spec.ValidationSplit`). A program run on it is fitted on train' and predicts the
held-out rows and the test rows at once, unable to tell them apart (same columns, fresh ids, mixed
order). The trusted grader (:func:`wmrl.tasks.grading.grade_submission`) splits the submission: the
held-out part is scored with the task's metric -> ``validation_score``; the test part is mapped back
to the original ids and graded exactly as usual -> score, reward, medal.

The sandbox hides the folder above the public folder it mounts, so ``private/`` of a view is as
invisible to a program as a task's own ``private/`` (and is mode 0700 besides).

Building is atomic (a temporary sibling folder renamed into place), so a crash never leaves a half-built
view and concurrent builders are safe: the first rename wins, the others use its result. A cached view
whose manifest is missing or whose files do not match it is rebuilt.

A view whose ``public/`` holds answers is refused before it is renamed into place: the files copied from the
task's ``public/`` are checked for the validation answers (the held-out rows under their view or original ids) and
the test answers (:func:`wmrl.tasks.leaks.public_leaks`), so no program ever reads a view that tells it the answers.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import time
import uuid
from pathlib import Path

import numpy as np
import pandas as pd

from wmrl.paths import wmrl_home
from wmrl.tasks.leaks import public_leaks
from wmrl.tasks.spec import Task, ValidationSplit

__all__ = ["ValidationSplit", "validation_view", "view_folder", "DEFAULT_FRACTION", "VIEW_FORMAT"]

#: The default held-out share of train.csv.
DEFAULT_FRACTION = 0.2
#: Version of the view layout; part of the cache key, so a change of layout rebuilds the views.
VIEW_FORMAT = 4
MANIFEST = "view.json"
_CORE_FILES = ("train.csv", "test.csv", "sample_submission.csv")
_INT_ID = re.compile(r"^-?\d+$")
#: Temporary build folders older than this (seconds) are a crashed builder's and are removed.
_STALE_TMP_S = 3600.0


def _stat_key(path: Path) -> list:
    st = path.stat()
    return [path.name, st.st_size, st.st_mtime_ns]


def view_folder(task: Task, fraction: float = DEFAULT_FRACTION, seed: int = 0,
                cache_dir: Path | str | None = None) -> Path:
    """Where :func:`validation_view` keeps the view of ``task`` (it need not exist yet).

    ``<cache_dir or wmrl_home()/validation>/<task.id>-<12 hex digits>``, the digits a hash of the sizes
    and modification times (ns) of train.csv, test.csv and sample_submission.csv, the fraction, the seed,
    the id and target columns, :data:`VIEW_FORMAT` and a hash of :func:`view_secret`: a rebuilt task (or a
    new secret) gets a new view.

    Raises:
        FileNotFoundError: a public file of the task is missing.
    """
    pub = Path(task.public_dir)
    key = {"files": [_stat_key(pub / "train.csv"), _stat_key(pub / "test.csv"), _stat_key(task.sample_submission_path)],
           "fraction": float(fraction), "seed": int(seed),
           "id": task.id_column, "target": task.target, "format": VIEW_FORMAT,
           "secret": hashlib.sha256(view_secret()).hexdigest()[:16]}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    base = Path(cache_dir) if cache_dir is not None else wmrl_home() / "validation"
    return base / f"{task.id}-{digest}"


def validation_view(task: Task, fraction: float = DEFAULT_FRACTION, seed: int = 0,
                    cache_dir: Path | str | None = None) -> Task:
    """The validation view of ``task``: same id, leaderboards and answers, a view ``public_dir``.

    Args:
        task: an ordinary task (CSV train/test/sample_submission; not itself a view).
        fraction: held-out share of train.csv's rows, in (0, 1); at least one row is held out and one kept.
        seed: seeds the split (stratified by target for classification when every class has >= 2 rows,
            scikit-learn ``train_test_split``) and the id shuffle, through :func:`split_seed` (salted with the
            installation's secret, so the seed and the row counts do not tell a program which rows are held out).
        cache_dir: where views are kept (default ``wmrl_home()/validation``); built once, then reused.

    Returns:
        ``dataclasses.replace(task, public_dir=<view>/public, validation=ValidationSplit(...),
        n_train=<rows of train'>, n_test=<held-out + test rows>)``.

    Raises:
        ValueError: ``task`` is already a view or its submission is the sample submission's table
            (:attr:`~wmrl.tasks.spec.Task.outputs`), ``fraction`` is outside (0, 1), train.csv has fewer than 2
            rows, lacks the target or id column, test.csv has a feature column train.csv lacks, or a file of the
            view's ``public/`` holds answers (one line naming the file).
        FileNotFoundError: a public file is missing.
    """
    if task.validation is not None:
        raise ValueError(f"task {task.id!r} is already a validation view; build the view from the original task")
    if task.outputs:
        raise ValueError(f"task {task.id!r} has no validation view: its submission is the sample submission's table "
                         f"({', '.join(task.outputs)}), graded only by the benchmark's code on the test rows")
    fraction = float(fraction)
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must lie in (0, 1), got {fraction!r} (e.g. 0.2 holds out 20% of train.csv)")
    folder = view_folder(task, fraction, seed, cache_dir)
    for _ in range(5):
        manifest = _read_complete(folder)
        if manifest is not None:
            break
        _discard(folder)
        _build(task, fraction, int(seed), folder)
    else:  # pragma: no cover - only when something keeps deleting the folder
        raise RuntimeError(f"could not build the validation view of task {task.id!r} at {folder}")
    split = ValidationSplit(fraction=fraction, seed=int(seed), idmap_path=folder / "private" / "idmap.csv",
                            val_answers_path=folder / "private" / "val_answers.csv",
                            n_validation=int(manifest["n_validation"]))
    return dataclasses.replace(task, public_dir=folder / "public", validation=split,
                               n_train=int(manifest["n_train"]), n_test=int(manifest["n_test"]))


def _read_complete(folder: Path) -> dict | None:
    """The manifest of a complete view at ``folder``, or None (missing, unreadable, files missing or changed)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
        for rel, size in files.items():
            if (folder / rel).stat().st_size != size:
                return None
        for rel in ("public/train.csv", "public/test.csv", "public/sample_submission.csv",
                    "private/idmap.csv", "private/val_answers.csv"):
            if rel not in files:
                return None
        int(manifest["n_validation"]), int(manifest["n_train"]), int(manifest["n_test"])
        return manifest
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _discard(folder: Path) -> None:
    """Remove a broken view folder safely while others may look at it: rename it aside, then delete it."""
    if not os.path.lexists(folder):
        return
    trash = folder.with_name(f".{folder.name}.trash-{uuid.uuid4().hex[:8]}")
    try:
        os.rename(folder, trash)
    except FileNotFoundError:
        return  # another builder got there first
    if trash.is_dir() and not trash.is_symlink():
        shutil.rmtree(trash, ignore_errors=True)
    else:
        trash.unlink(missing_ok=True)


def _sweep_stale(folder: Path) -> None:
    now = time.time()
    for p in folder.parent.glob(f".{folder.name}.*"):
        try:
            if now - p.stat().st_mtime > _STALE_TMP_S:
                shutil.rmtree(p, ignore_errors=True)
        except OSError:
            pass


def _read_text_csv(path: Path) -> pd.DataFrame:
    """A CSV with every cell as its exact text (no NA parsing), so that rewriting it changes no value."""
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def _link_or_copy(src: str, dst: str) -> str:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


def view_secret() -> bytes:
    """This installation's secret salt of validation splits: ``$WMRL_VIEW_SECRET`` (any text; set the same value
    on several machines to get the same views everywhere), else 32 random bytes kept in
    ``wmrl_home()/validation/secret`` (mode 0600; made once, atomically). wmrl's data home is masked in the
    sandbox, so no program can read it.

    Raises:
        OSError: the secret file cannot be read or made.
    """
    env = os.environ.get("WMRL_VIEW_SECRET")
    if env:
        return env.encode()
    path = wmrl_home() / "validation" / "secret"
    try:
        return path.read_bytes()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".secret.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(32))
        try:
            os.link(tmp, path)  # the first maker wins; the others read its secret
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
        return path.read_bytes()


def split_seed(seed: int) -> int:
    """The random state of a view's split and shuffle: SHA-256 of :func:`view_secret` and ``seed``, as a 32-bit
    integer. Fixed for an installation and seed, yet not computable by a program, which never reads the
    secret: knowing the seed and the row counts does not tell it which train rows were held out.

    Raises:
        OSError: as :func:`view_secret`.
    """
    h = hashlib.sha256(view_secret())
    h.update(f"\0validation-view-seed={int(seed)}".encode())
    return int.from_bytes(h.digest()[:4], "little")


def _split(train: pd.DataFrame, task: Task, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Row positions ``(kept, held_out)`` of train.csv, each sorted."""
    from sklearn.model_selection import train_test_split  # noqa: PLC0415 - heavy (sklearn)

    n = len(train)
    n_val = min(n - 1, max(1, int(round(fraction * n))))
    stratify = None
    if task.type != "regression":
        counts = train[task.target].value_counts()
        if len(counts) >= 2 and int(counts.min()) >= 2 and n_val >= len(counts) and n - n_val >= len(counts):
            stratify = train[task.target]
    idx = np.arange(n)
    keep, held = train_test_split(idx, test_size=n_val, random_state=seed, shuffle=True, stratify=stratify)
    return np.sort(keep), np.sort(held)


def _build(task: Task, fraction: float, seed: int, folder: Path) -> None:
    """Build the view in a temporary sibling folder and rename it to ``folder`` (atomic)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    _sweep_stale(folder)
    tmp = folder.with_name(f".{folder.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    tmp.mkdir()
    try:
        _write_view(task, fraction, seed, tmp)
        _refuse_leaks(task, fraction, seed, tmp)
        try:
            os.replace(tmp, folder)
        except OSError:
            if _read_complete(folder) is None:  # not another builder's complete view: try again (caller loops)
                _discard(folder)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _refuse_leaks(task: Task, fraction: float, seed: int, out: Path) -> None:
    """Refuse the view built at ``out`` when a file of its ``public/`` holds answers
    (:func:`wmrl.tasks.leaks.public_leaks` on the view task).

    Raises:
        ValueError: one line naming the task, the file and what it holds.
    """
    manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    split = ValidationSplit(fraction=fraction, seed=seed, idmap_path=out / "private" / "idmap.csv",
                            val_answers_path=out / "private" / "val_answers.csv",
                            n_validation=int(manifest["n_validation"]))
    found = public_leaks(dataclasses.replace(task, public_dir=out / "public", validation=split))
    if found:
        raise ValueError(f"task {task.id!r} has no validation view: {found[0]} (the file is copied from the task's "
                         "public/ into the view); remove it from public/ or drop the targets from it")


def _write_view(task: Task, fraction: float, seed: int, out: Path) -> None:
    src = Path(task.public_dir)
    idc, target = task.id_column, task.target
    train = _read_text_csv(src / "train.csv")
    test = _read_text_csv(src / "test.csv")
    sample = _read_text_csv(task.sample_submission_path)
    for name, df, need in (("train.csv", train, (idc, target)), ("test.csv", test, (idc,))):
        missing = [c for c in need if c not in df.columns]
        if missing:
            raise ValueError(f"task {task.id!r}: {name} has no column(s) {missing}; a validation view needs the "
                             f"id column {idc!r} in train.csv and test.csv and the target {target!r} in train.csv")
    if len(train) < 2:
        raise ValueError(f"task {task.id!r}: train.csv has {len(train)} row(s); a validation split needs at least 2")
    lacking = [c for c in test.columns if c not in train.columns]
    if lacking:
        raise ValueError(f"task {task.id!r}: test.csv has column(s) {lacking[:5]} that train.csv lacks, so held-out "
                         "train rows could not be mixed into test.csv unnoticed; no validation view for this task")
    state = split_seed(seed)
    keep_pos, held_pos = _split(train, task, fraction, state)
    kept, held = train.iloc[keep_pos], train.iloc[held_pos]
    n_val, n_test = len(held), len(test)
    n = n_val + n_test
    rng = np.random.default_rng(state)
    perm = rng.permutation(n)
    originals = pd.concat([held[idc], test[idc]], ignore_index=True).astype(str).str.strip()
    if originals.str.fullmatch(_INT_ID).all():
        view_ids = pd.Series(perm.astype(str))
    else:
        width = len(str(n - 1))
        view_ids = pd.Series([f"id{k:0{width}d}" for k in perm])
    parts = pd.Series(["val"] * n_val + ["test"] * n_test)
    # The mixed test.csv is parsed and written by one writer, so that a formatting difference between the
    # original train.csv and test.csv ("3" vs "3.0", "NA" vs "") cannot tell held-out rows from test rows.
    typed_train = pd.read_csv(src / "train.csv", dtype={idc: str}, low_memory=False)
    typed_test = pd.read_csv(src / "test.csv", dtype={idc: str}, low_memory=False)
    features = pd.concat([typed_train.iloc[held_pos][list(typed_test.columns)], typed_test], ignore_index=True)
    features[idc] = view_ids.to_numpy()
    order = np.argsort(perm, kind="stable")  # rows in view-id order: held-out and test rows mixed

    pub, priv = out / "public", out / "private"
    pub.mkdir()
    priv.mkdir()
    kept.to_csv(pub / "train.csv", index=False)
    features.iloc[order].to_csv(pub / "test.csv", index=False)
    if idc in sample.columns and len(sample):
        fill = sample.iloc[0]
        sub = pd.DataFrame({c: (view_ids.iloc[order].to_numpy() if c == idc else [fill[c]] * n)
                            for c in sample.columns})
    else:  # an odd sample submission: keep its columns, id column first
        sub = pd.DataFrame({idc: view_ids.iloc[order].to_numpy()})
        for c in sample.columns:
            if c != idc:
                sub[c] = sample[c].iloc[0] if len(sample) else ""
    sub.to_csv(pub / "sample_submission.csv", index=False)
    for entry in src.iterdir():
        if entry.name in _CORE_FILES or entry.name == task.sample_submission_path.name:
            continue
        if entry.is_dir():
            shutil.copytree(entry, pub / entry.name, copy_function=_link_or_copy)
        elif entry.is_file():
            _link_or_copy(str(entry), str(pub / entry.name))
    pd.DataFrame({"view_id": view_ids, "part": parts, "original_id": originals}).iloc[order].to_csv(
        priv / "idmap.csv", index=False)
    pd.DataFrame({idc: view_ids.iloc[:n_val].to_numpy(), target: held[target].to_numpy()}).to_csv(
        priv / "val_answers.csv", index=False)

    for p in [pub, *pub.rglob("*")]:  # as the task builder does (chmod -R a+rX): the sandbox's uid reads it
        if not p.is_symlink():
            extra = 0o555 if p.is_dir() else 0o444
            mode = p.stat().st_mode
            if mode & extra != extra:
                os.chmod(p, (mode & 0o7777) | extra)
    os.chmod(out, 0o755)
    os.chmod(priv, 0o700)
    for p in priv.iterdir():
        os.chmod(p, 0o600)
    files = {str(p.relative_to(out)): p.stat().st_size for p in sorted(out.rglob("*")) if p.is_file()}
    manifest = {"task_id": task.id, "fraction": fraction, "seed": seed, "n_validation": n_val,
                "n_train": len(kept), "n_test": n, "format": VIEW_FORMAT, "files": files}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
    os.chmod(out / MANIFEST, 0o644)
