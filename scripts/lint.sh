#!/usr/bin/env bash
# Lint every Python file of the repository (ruff) and type-check the package (mypy); both are configured in
# pyproject.toml and installed by the `test` extra (scripts/install.sh). Exits non-zero when either finds anything.
# scripts/test.sh runs it before the tests; alone: `bash scripts/lint.sh` (ruff's and mypy's own options pass
# through neither).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${VIRTUAL_ENV:-}" ] && [ -x .venv/bin/python ]; then
  . .venv/bin/activate
fi
status=0
python -m ruff check --quiet . || status=1
python -m mypy || status=1
exit "$status"
