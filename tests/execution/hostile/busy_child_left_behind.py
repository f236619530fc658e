"""EXPECT: ok -- leave a detached, busy grandchild behind and exit with a valid submission."""
import os
import shutil
import time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        t = time.time()
        while True:
            if time.time() - t > 600:
                break
        with open("late.txt", "w") as f:
            f.write("still alive")
    os._exit(0)
shutil.copy("input/sample_submission.csv", "submission.csv")
time.sleep(0.3)
