"""EXPECT: memory_exceeded -- raise its own limits (refused), then allocate past the memory limit."""
import resource
for name in ("RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_NOFILE"):
    lim = getattr(resource, name)
    try:
        resource.setrlimit(lim, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        print("RAISED", name)
    except (ValueError, OSError) as e:
        print("refused", name, e)
x = bytearray(3 * 1024 ** 3)
