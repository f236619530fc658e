"""Every table a file holds, read within bounds: what a program could read from a task's ``public/``.

:func:`read_tables` reads CSV, TSV and other delimited text (the delimiter sniffed among ``,`` tab ``;`` ``|``),
JSON (records, columns, ``split`` and index orients, an id -> value mapping, tables nested below the top), JSON
lines, Parquet, Feather/Arrow IPC; each also gzip-, bz2-, xz- or zip-compressed (every member of a zip, up to
:data:`MAX_ZIP_MEMBERS`). The form is taken from the name's suffix, else from the file's first bytes, so a
misnamed table is still read; media and model files (:data:`SKIP_SUFFIXES`) are for callers to leave out.
Bounds: the first :data:`MAX_READ_BYTES` of each file (decompressed; all members of a zip together),
:data:`MAX_ROWS` rows and :data:`MAX_COLUMNS` columns per table. A file that no reader parses within these bounds
gives no table, never an error.
"""
from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd

#: Decompressed bytes read per file (the rest is ignored), bytes.
MAX_READ_BYTES = 64 * 1024**2
#: Rows and columns read per table.
MAX_ROWS = 2_000_000
MAX_COLUMNS = 512
#: Members read per zip archive.
MAX_ZIP_MEMBERS = 64
#: Files never read as tables, by suffix (lower-cased).
SKIP_SUFFIXES = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".tif", ".tiff", ".webp", ".wav", ".mp3", ".flac", ".ogg",
                 ".mp4", ".avi", ".mov", ".pdf", ".npy", ".npz", ".pt", ".pth", ".bin", ".safetensors", ".h5", ".dcm",
                 ".nii")

_COMPRESSED: dict[str, Callable[..., Any]] = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
_MAGIC_COMPRESSED = ((b"\x1f\x8b", ".gz"), (b"BZh", ".bz2"), (b"\xfd7zXZ\x00", ".xz"), (b"PK\x03\x04", ".zip"))
_DELIMITED = {".csv": ",", ".tsv": "\t", ".tab": "\t", ".psv": "|", ".txt": ",", ".dat": ",", ".data": ","}
_JSON = (".json", ".jsonl", ".ndjson")
_PARQUET = (".parquet", ".pq")
_ARROW = (".feather", ".arrow", ".ipc")


def _read_capped(path: Path, suffix: str) -> bytes:
    opener = _COMPRESSED.get(suffix, open)
    with opener(path, "rb") as f:
        return f.read(MAX_READ_BYTES)


def _blobs(path: Path) -> Iterator[tuple[str, bytes, bool]]:
    """(name, decompressed bytes, is a zip member) of each stream in the file: itself (its name lower-cased,
    less a compression suffix), or each member of a zip archive (its name in the archive)."""
    name = path.name.lower()
    suffix = Path(name).suffix
    if suffix not in _COMPRESSED and suffix != ".zip":
        with open(path, "rb") as f:
            head = f.read(8)
        suffix = next((s for magic, s in _MAGIC_COMPRESSED if head.startswith(magic)), "")
        name = name + suffix if suffix else name
    if suffix == ".zip":
        left = MAX_READ_BYTES  # for all members together
        with zipfile.ZipFile(path) as z:
            for info in [i for i in z.infolist() if not i.is_dir()][:MAX_ZIP_MEMBERS]:
                with z.open(info) as f:
                    blob = f.read(left)
                left -= len(blob)
                yield info.filename, blob, True
                if left <= 0:
                    return
        return
    yield (name[: -len(suffix)] if suffix else name), _read_capped(path, suffix), False


def _delimiter(text: str, default: str) -> str:
    """The delimiter among , tab ; | that splits the first lines into the same number (> 0) of fields."""
    lines = [ln for ln in text.splitlines()[:50] if ln.strip()]
    if not lines:
        return default
    best, best_n = default, 0
    for d in (default, ",", "\t", ";", "|"):
        counts = {ln.count(d) for ln in lines[:-1] or lines}
        if len(counts) == 1 and (n := counts.pop()) > best_n:
            best, best_n = d, n
    return best


def _json_tables(obj: Any, depth: int = 0) -> list[pd.DataFrame]:
    """The tables of a parsed JSON document: records, columns, ``split``, index orients, an id -> value mapping,
    and the same nested below the top (up to 3 levels)."""
    out: list[pd.DataFrame] = []
    if depth > 3:
        return out
    if isinstance(obj, list) and obj:
        head = obj[:100]
        if all(isinstance(r, dict) for r in head):
            out.append(pd.DataFrame.from_records(obj[:MAX_ROWS]))
        elif all(isinstance(r, list) for r in head):
            out.append(pd.DataFrame(obj[:MAX_ROWS]))
        elif not any(isinstance(r, (list, dict)) for r in head):
            out.append(pd.DataFrame({"(values)": obj[:MAX_ROWS]}))
    elif isinstance(obj, dict) and obj:
        vals = list(obj.values())
        if isinstance(obj.get("columns"), list) and isinstance(obj.get("data"), list):
            try:
                out.append(pd.DataFrame(obj["data"][:MAX_ROWS], columns=obj["columns"]))
            except ValueError:
                pass
        if not any(isinstance(v, (list, dict)) for v in vals):
            out.append(pd.DataFrame({"(key)": list(obj.keys()), "(value)": vals}))
        elif all(isinstance(v, list) for v in vals) and len({len(v) for v in vals}) == 1:
            out.append(pd.DataFrame({k: v[:MAX_ROWS] for k, v in obj.items()}))
        elif all(isinstance(v, dict) for v in vals):
            inner = list(vals[0].values())[:1]
            if not any(isinstance(v, (list, dict)) for v in inner):
                out.append(pd.DataFrame.from_dict(obj, orient="index").reset_index(names="(key)"))
                out.append(pd.DataFrame(obj).reset_index(names="(key)"))
        if not out:
            for v in vals[:MAX_ZIP_MEMBERS]:
                out += _json_tables(v, depth + 1)
    return out


def _arrow_table(blob: bytes, parquet: bool) -> pd.DataFrame:
    import pyarrow as pa  # noqa: PLC0415 - heavy, only for binary tables
    import pyarrow.feather as feather  # noqa: PLC0415
    import pyarrow.parquet as pq  # noqa: PLC0415

    batches, rows = [], 0
    if parquet:
        it = pq.ParquetFile(io.BytesIO(blob)).iter_batches(batch_size=65536)
    else:
        try:
            reader = pa.ipc.open_file(io.BytesIO(blob))
            it = (reader.get_batch(i) for i in range(reader.num_record_batches))
        except pa.ArrowInvalid:
            try:
                it = iter(pa.ipc.open_stream(io.BytesIO(blob)))
            except pa.ArrowInvalid:
                it = iter(feather.read_table(io.BytesIO(blob)).to_batches())
    for b in it:
        batches.append(b.slice(0, MAX_ROWS - rows))
        rows += batches[-1].num_rows
        if rows >= MAX_ROWS:
            break
    if not batches:
        return pd.DataFrame()
    return pa.Table.from_batches(batches).to_pandas()


def _parse(name: str, blob: bytes) -> list[pd.DataFrame]:
    """The tables in one decompressed stream, by the name's suffix, else by its first bytes ([] if none)."""
    suffix = Path(name.lower()).suffix
    if suffix in _PARQUET or blob.startswith(b"PAR1"):
        return [_arrow_table(blob, parquet=True)]
    if suffix in _ARROW or blob.startswith((b"ARROW1", b"FEA1", b"\xff\xff\xff\xff")):
        return [_arrow_table(blob, parquet=False)]
    if b"\0" in blob[:8192]:
        return []
    text = blob.decode("utf-8", errors="replace")
    if len(blob) == MAX_READ_BYTES:  # cut: keep whole lines
        text = text[: text.rfind("\n") + 1]
    stripped = text.lstrip()
    if suffix in _JSON or stripped[:1] in ("{", "["):
        try:
            return _json_tables(json.loads(text))
        except ValueError:
            pass
        try:
            return [pd.read_json(io.StringIO(text), lines=True, dtype=False, nrows=MAX_ROWS)]
        except ValueError:
            if suffix in _JSON:
                return []
    sep = _delimiter(text[:65536], _DELIMITED.get(suffix, ","))
    return [pd.read_csv(io.StringIO(text), sep=sep, dtype=str, keep_default_na=False, nrows=MAX_ROWS,
                        on_bad_lines="skip", engine="c", low_memory=False)]


def read_tables(path: Path) -> list[tuple[str, pd.DataFrame]]:
    """Every table in the file at ``path`` (module docstring: forms and bounds) as (where, table): ``where`` is
    empty, or the member of a zip archive that holds the table; column names as str, at most :data:`MAX_COLUMNS`
    columns. Never raises: a file that cannot be parsed gives ``[]``."""
    out: list[tuple[str, pd.DataFrame]] = []
    try:
        for name, blob, member in _blobs(path):
            try:
                tables = _parse(name, blob)
            except Exception:  # noqa: BLE001 - any reader's failure means: no table here
                continue
            for df in tables:
                if isinstance(df, pd.DataFrame) and len(df) and len(df.columns):
                    df = df.iloc[:, :MAX_COLUMNS]
                    df.columns = [str(c).strip() for c in df.columns]
                    out.append((name if member else "", df.reset_index(drop=True)))
    except (OSError, EOFError, zipfile.BadZipFile, lzma.LZMAError, ValueError, RuntimeError):
        return out
    return out

