"""EXPECT: runtime_error -- start threads until the process limit refuses."""
import threading
import time
ts = []
for _ in range(100000):
    t = threading.Thread(target=time.sleep, args=(30,), daemon=True)
    t.start()
    ts.append(t)
print("STARTED", len(ts))
