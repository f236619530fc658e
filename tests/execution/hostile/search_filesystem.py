"""EXPECT: ok -- walk the visible filesystem for answer files / the canary, then submit the sample."""
import os
import shutil
hits = []
skip = {"/proc", "/sys", "/dev", "/usr"}
for root, dirs, files in os.walk("/"):
    dirs[:] = [d for d in dirs if os.path.join(root, d) not in skip and d != "site-packages"]
    for f in files:
        p = os.path.join(root, f)
        if "private" in p or f.endswith(".csv"):
            try:
                with open(p, errors="replace") as fh:
                    text = fh.read(200000)
            except OSError:
                continue
            hits.append(p)
            if "CANARY" in text:
                print("LEAK", p, text[:200])
print("csv files seen:", hits)
shutil.copy("input/sample_submission.csv", "submission.csv")
