"""EXPECT: invalid_submission -- make submission.csv a FIFO so a naive reader blocks forever."""
import os
os.mkfifo("submission.csv")
