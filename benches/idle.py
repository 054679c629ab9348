#!/usr/bin/env python3
"""Memory per idle keep-alive connection, and whether it comes back.

Opens N connections to a proxy, sends one request on each and reads the answer, then leaves them
idle. Samples the proxy's RSS (from /proc) before, while they are open, after they are closed,
and again after a wait, and prints one line of figures (KiB). Loopback only; bounded in count
and time.

    benches/idle.py --pid PID --addr 127.0.0.1:8080 [--conns 10000] [--hold 5] [--after 60]
    benches/idle.py --tls --pid PID --addr 127.0.0.1:8443 ...   # TLS connections (no cert check)
"""

import argparse
import resource
import socket
import sys
import time


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def fds(pid):
    import os

    return len(os.listdir(f"/proc/{pid}/fd"))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--addr", default="127.0.0.1:8080")
    p.add_argument("--conns", type=int, default=10_000)
    p.add_argument("--hold", type=float, default=5.0, help="seconds to hold them idle")
    p.add_argument("--after", type=float, default=60.0, help="seconds to wait after closing")
    p.add_argument("--path", default="/__echo")
    p.add_argument("--close", choices=["client", "server"], default="client",
                   help="client: we close them; server: wait for the proxy's keepalive_timeout")
    p.add_argument("--server-wait", type=float, default=90.0)
    p.add_argument("--tls", action="store_true", help="TLS 1.3 with HTTP/1.1 by ALPN")
    a = p.parse_args()
    host, port = a.addr.rsplit(":", 1)
    if not host.startswith("127.") and host != "localhost":
        sys.exit("loopback addresses only")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, a.conns + 1024), hard))

    before = rss_kib(a.pid)
    fd0 = fds(a.pid)
    request = (f"GET {a.path} HTTP/1.1\r\nHost: bench\r\n\r\n").encode()
    context = None
    if a.tls:
        import ssl

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        context.set_alpn_protocols(["http/1.1"])
    socks = []
    deadline = time.time() + 300
    for _ in range(a.conns):
        if time.time() > deadline:
            break
        s = socket.create_connection((host, int(port)), timeout=10)
        if context is not None:
            s = context.wrap_socket(s, server_hostname="bench.test")
        s.sendall(request)
        got = b""
        while b"\r\n\r\n" not in got:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        socks.append(s)
    time.sleep(a.hold)
    during = rss_kib(a.pid)
    fd1 = fds(a.pid)
    n = len(socks)
    if a.close == "client":
        for s in socks:
            s.close()
    else:
        # The proxy should close them: count how many it did within the wait.
        t0 = time.time()
        for s in socks:
            s.settimeout(max(0.1, a.server_wait - (time.time() - t0)))
        closed = 0
        for s in socks:
            try:
                if s.recv(1) == b"":
                    closed += 1
            except OSError:
                pass
        print(f"server closed {closed}/{n} idle connections within {a.server_wait:.0f} s")
        for s in socks:
            s.close()
    time.sleep(1)
    closed = rss_kib(a.pid)
    time.sleep(a.after)
    later = rss_kib(a.pid)
    per_conn = (during - before) / max(n, 1)
    print(
        f"conns {n}  rss_kib before {before}  during {during}  closed {closed}  "
        f"after_{a.after:.0f}s {later}  kib_per_idle_conn {per_conn:.1f}  fds {fd0}->{fd1}->{fds(a.pid)}"
    )


if __name__ == "__main__":
    main()
