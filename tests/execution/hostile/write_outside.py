"""EXPECT: ok -- try to create or change files everywhere outside the workdir, then submit."""
import os
import shutil
targets = ["__TASK_ROOT__/pwned.txt", "__TASK_ROOT__/private/test.csv", "__OUTSIDE_DIR__/pwned.txt",
           "__OUTSIDE_DIR__/canary.txt", "input/pwned.txt", "input/test.csv", "/usr/pwned.txt",
           "/etc/passwd", "/sandbox/solution.py", "/pwned.txt", "/root/pwned.txt", "__PYTHON_PREFIX__/pwned.txt",
           "/proc/sys/kernel/hostname"]
for t in targets:
    try:
        with open(t, "a") as f:
            f.write("pwned")
        print("WROTE", t)
    except OSError as e:
        print("blocked", t, type(e).__name__)
for d in ["__OUTSIDE_DIR__", "/workspace/input", "/usr/lib"]:
    try:
        os.rename(d, d + ".moved")
        print("WROTE rename", d)
    except OSError as e:
        print("blocked rename", d, type(e).__name__)
shutil.copy("input/sample_submission.csv", "submission.csv")
