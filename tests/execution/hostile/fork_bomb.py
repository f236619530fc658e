"""EXPECT: timeout -- classic fork bomb: every process forks forever."""
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
