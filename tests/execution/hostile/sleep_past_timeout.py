"""EXPECT: timeout -- sleep far past the wall-clock limit (no CPU used)."""
import time
time.sleep(3600)
