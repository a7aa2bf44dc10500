#!/usr/bin/env python3
"""Open N idle TCP connections to HOST:PORT, hold them until stdin closes or HOLD seconds pass.

Prints 'held N' once every connection is established. With PROTO `ws`, each connection is
upgraded to a WebSocket first (the 101 read on every one) and then idles. Used by
bench/idle_memory.py.

Usage: hold_idle.py HOST PORT N [HOLD] [tcp|ws]
"""
import socket
import sys
import time

host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
hold = float(sys.argv[4]) if len(sys.argv) > 4 else 30.0
proto = sys.argv[5] if len(sys.argv) > 5 else "tcp"
UPGRADE = (b"GET / HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
conns = []
for i in range(count):
    s = socket.create_connection((host, port), timeout=10)
    if proto == "ws":
        s.sendall(UPGRADE)
    conns.append(s)
if proto == "ws":
    # Every connection's 101, read whole: each was accepted and upgraded.
    for s in conns:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(4096)
            if not chunk:
                sys.exit("a connection closed before its 101")
            head += chunk
        if not head.startswith(b"HTTP/1.1 101 "):
            sys.exit("no 101: " + head.split(b"\r\n")[0].decode(errors="replace"))
else:
    # A round trip on the last connection proves the server has accepted everything queued before it.
    conns[-1].sendall(b"x")
    conns[-1].recv(1)
print(f"held {len(conns)}", flush=True)
deadline = time.time() + hold
while time.time() < deadline:
    time.sleep(0.2)
