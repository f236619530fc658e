"""EXPECT: timeout -- burn CPU with a generous wall limit; the per-process CPU limit stops it.
CONFIG: cpu_time_s=1 time_limit_s=8"""
import signal
signal.signal(signal.SIGXCPU, signal.SIG_IGN)  # ignoring the soft limit does not help: SIGKILL follows
x = 0
while True:
    x += 1
