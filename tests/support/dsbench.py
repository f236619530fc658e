"""Evaluation scripts in DSBench's convention (``python <id>_eval.py --answer_file A --predict_file P --path OUT
--name N``, the score written to ``OUT/N/result.txt``), written by the tests that build DSBench layouts."""
from __future__ import annotations

_SCRIPT = '''import argparse
import os

import numpy as np
import pandas as pd
from sklearn.metrics import f1_score, roc_auc_score, mean_absolute_error

parser = argparse.ArgumentParser()
parser.add_argument('--path', type=str, required=True)
parser.add_argument('--name', type=str, required=True)
parser.add_argument('--answer_file', type=str, required=True)
parser.add_argument('--predict_file', type=str, required=True)
parser.add_argument('--value', type=str, default="{value}")
args = parser.parse_args()
answers = pd.read_csv(args.answer_file)
predictions = pd.read_csv(args.predict_file)
{body}
with open(os.path.join(args.path, args.name, "result.txt"), "w") as f:
    f.write(str(performance))
'''


def dsbench_eval_script(body: str, value: str = "count") -> str:
    """A DSBench evaluation script: ``body`` (Python source that sets ``performance`` from ``answers`` and
    ``predictions``, two DataFrames, and may read ``args.value``) between DSBench's argument parsing, with
    ``--value`` defaulting to ``value``, and its writing of ``result.txt``."""
    return _SCRIPT.format(value=value, body=body)
