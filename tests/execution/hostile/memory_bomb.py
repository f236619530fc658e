"""EXPECT: memory_exceeded -- grow a list of 64 MB blocks until allocation fails. CONFIG: time_limit_s=15"""
blocks = []
while True:
    blocks.append(bytearray(64 * 1024 * 1024))
