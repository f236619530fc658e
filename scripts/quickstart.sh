#!/usr/bin/env bash
# The README's main job: installs everything (idempotent), builds the built-in task suite,
# trains the agent with WMRL on real tasks (configs/quickstart.yaml) and writes the HTML report.
# Run it again after an interruption: the training continues from its last checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
. .venv/bin/activate
export WMRL_HOME="${WMRL_HOME:-$PWD/.wmrl-cache}"
RUN_DIR="${RUN_DIR:-runs/quickstart}"
wmrl tasks build
if [ -f "$RUN_DIR/config.yaml" ]; then
  wmrl train --resume "$RUN_DIR" "$@"        # continue (or, if finished, just summarise) an earlier run
else
  wmrl train --config configs/quickstart.yaml --set run_dir="$RUN_DIR" "$@"
fi
wmrl report "$RUN_DIR" --out "$RUN_DIR/report.html"
echo "Report: $RUN_DIR/report.html"
