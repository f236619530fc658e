"""EXPECT: invalid_submission -- a submission with the test ids plus extra ids."""
import pandas as pd
s = pd.read_csv("input/sample_submission.csv")
extra = pd.DataFrame({"id": [10**6, 10**6 + 1], "y": [0.5, 0.5]})
pd.concat([s, extra]).to_csv("submission.csv", index=False)
