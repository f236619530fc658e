"""EXPECT: runtime_error -- many files each under the file-size limit, in the workdir and /tmp (disk quota)."""
import itertools
import time
for i in itertools.count():
    for d in (".", "/tmp"):
        with open(f"{d}/fill{i}.bin", "wb") as f:
            f.write(b"\1" * (4 << 20))
    time.sleep(0.01)
