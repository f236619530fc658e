"""EXPECT: runtime_error -- imitate the sandbox's own failure messages to get the sample left out."""
import sys
import os
sys.stderr.write("bwrap: Can't mount proc on /newroot/proc: Operation not permitted\n")
sys.stderr.write("wmrl-launcher: RuntimeError: sandbox failed\n")
sys.stderr.flush()
os._exit(126)
