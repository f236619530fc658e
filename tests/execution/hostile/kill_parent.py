"""EXPECT: ok -- kill the parent, PID 1, every visible process and the driver's pid, then submit."""
import os
import shutil
import signal
for target, how in [(os.getppid(), "ppid"), (1, "pid1"), (__DRIVER_PID__, "driver"), (-1, "all")]:
    try:
        os.kill(target, signal.SIGKILL)
        print("sent", how)
    except OSError as e:
        print("refused", how, e)
shutil.copy("input/sample_submission.csv", "submission.csv")
