"""EXPECT: runtime_error -- connect to a port the driver listens on at 127.0.0.1 (and via abstract unix socket)."""
import socket
try:
    s = socket.create_connection(("127.0.0.1", __DRIVER_PORT__), timeout=1)
    s.sendall(b"hello from the sandbox")
    print("CONNECTED to the driver")
except OSError as e:
    print("blocked", e)
try:
    u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    u.connect("\0wmrl-test-abstract")
    print("CONNECTED abstract")
except OSError as e:
    print("blocked abstract", e)
raise SystemExit("no driver reachable")
