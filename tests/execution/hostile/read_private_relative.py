"""EXPECT: runtime_error -- reach private/ relative to input/ and through /proc/self/root."""
import os
found = []
for p in ["input/../private/test.csv", "../private/test.csv", "input/../../private/test.csv",
          "/proc/self/root__TASK_ROOT__/private/test.csv", "/proc/1/root__TASK_ROOT__/private/test.csv",
          os.path.realpath("input") + "/../private/test.csv"]:
    try:
        found.append(open(p).read())
    except OSError as e:
        print("blocked", p, type(e).__name__)
if not found:
    raise SystemExit("no private answers reachable")
print(found[0])
