"""EXPECT: memory_exceeded -- one huge numpy allocation (numpy raises its own MemoryError)."""
import numpy as np
a = np.ones((40000, 40000))
print(a.sum())
