"""EXPECT: runtime_error -- open files until the descriptor limit refuses."""
fs = []
while True:
    fs.append(open("input/train.csv"))
