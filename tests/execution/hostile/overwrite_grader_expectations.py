"""EXPECT: ok -- overwrite the answers, the public test ids and the leaderboard, then submit the sample."""
import os
import shutil
for t in ["__PRIVATE_PATH__", "__TASK_ROOT__/leaderboard.csv", "input/sample_submission.csv", "input/test.csv"]:
    try:
        with open(t, "w") as f:
            f.write("id,y\n")
        print("WROTE", t)
    except OSError as e:
        print("blocked", t, type(e).__name__)
    try:
        os.unlink(t)
        print("WROTE unlink", t)
    except OSError as e:
        print("blocked unlink", t, type(e).__name__)
shutil.copy("input/sample_submission.csv", "submission.csv")
