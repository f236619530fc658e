#!/usr/bin/env bash
# A separate environment for the verl integration (verl 0.9.1 needs transformers>=5.5.3,<5.11; wmrl's
# own environment has a later transformers 5). Creates .venv-verl; wmrl itself is used from the checkout
# via PYTHONPATH. Measured on a 2-core x86 CPU: 4 min 39 s for torch (CPU wheel) + verl + transformers 5.9.0 on 2 busy cores.
# TransferQueue is what verl's default (V1) trainer keeps its batches in (verl's "verl-core" extra needs it);
# wmrl's trainer hook (wmrl/integrations/verl_trainer.py) and its test use it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
[ -x .venv-verl/bin/python ] || "$PY" -m venv .venv-verl
.venv-verl/bin/pip install -q "torch==2.13.0" "verl==0.9.1" "transformers==5.9.0" "TransferQueue==0.1.11" \
  cachetools uvicorn fastapi pyzmq msgspec \
  scipy "scikit-learn>=1.6,<1.10" pyyaml "pydantic>=2.7,<3" typer rich safetensors gguf matplotlib \
  pytest pytest-timeout
echo "run: PYTHONPATH=\$PWD .venv-verl/bin/python -m pytest tests/integrations/test_verl.py tests/integrations/test_verl_trainer.py"
