#!/usr/bin/env bash
# The README's test command: installs everything (idempotent), lints and type-checks (scripts/lint.sh), then runs
# the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
. .venv/bin/activate
bash scripts/lint.sh
export WMRL_HOME="${WMRL_HOME:-$PWD/.wmrl-cache}"
python -m pytest -q -p no:cacheprovider --timeout=900 "$@"
