"""EXPECT: ok -- print 40 MB to stdout and stderr, then submit correctly."""
import shutil
import sys
line = "x" * 1023 + "\n"
for _ in range(20 * 1024):
    sys.stdout.write(line)
    sys.stderr.write(line)
shutil.copy("input/sample_submission.csv", "submission.csv")
