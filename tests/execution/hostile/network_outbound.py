"""EXPECT: runtime_error -- open outbound TCP/UDP connections and resolve a name."""
import socket
ok = []
for host, port in [("1.1.1.1", 53), ("8.8.8.8", 443), ("93.184.216.34", 80)]:
    try:
        s = socket.create_connection((host, port), timeout=1)
        ok.append(host)
        print("CONNECTED", host)
    except OSError as e:
        print("blocked", host, e)
try:
    print("CONNECTED dns", socket.gethostbyname("example.com"))
    ok.append("dns")
except OSError as e:
    print("blocked dns", e)
try:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.sendto(b"x", ("1.1.1.1", 53))
    print("CONNECTED udp")
except OSError as e:
    print("blocked udp", e)
raise SystemExit("no network")
