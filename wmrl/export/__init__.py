"""Exporting runs as datasets: every sample of a run directory or bench folder as one Parquet file with a
versioned, documented schema (docs/export.md), loadable by ``datasets.load_dataset("parquet", ...)`` and pandas.

It reads run and bench folders as files only (docs/run-directory.md) and imports no other wmrl package.
"""
from wmrl.export.dataset import ExportError, ExportResult, RunReport, export, find_runs, output_path
from wmrl.export.schema import (COLUMNS, METADATA_KEY, RUNS_METADATA_KEY, SCHEMA_VERSION, arrow_schema, column_names,
                                schema_markdown)

__all__ = ["COLUMNS", "METADATA_KEY", "RUNS_METADATA_KEY", "SCHEMA_VERSION", "ExportError", "ExportResult",
           "RunReport", "arrow_schema", "column_names", "export", "find_runs", "output_path", "schema_markdown"]
