"""EXPECT: invalid_submission -- make submission.csv a symlink to the private answers' host path."""
import os
os.symlink("__PRIVATE_PATH__", "submission.csv")
