"""EXPECT: runtime_error -- write one endless file (RLIMIT_FSIZE stops it)."""
with open("big.bin", "wb") as f:
    while True:
        f.write(b"\0" * (1 << 20))
