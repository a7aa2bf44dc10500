#!/usr/bin/env python3
"""Open N idle TCP connections to HOST:PORT, hold them until stdin closes or HOLD seconds pass.

Prints 'held N' once every connection is established. Used by bench/idle_memory.sh.
"""
import socket
import sys
import time

host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
hold = float(sys.argv[4]) if len(sys.argv) > 4 else 30.0
conns = []
for i in range(count):
    s = socket.create_connection((host, port), timeout=10)
    conns.append(s)
# A round trip on the last connection proves the server has accepted everything queued before it.
conns[-1].sendall(b"x")
conns[-1].recv(1)
print(f"held {len(conns)}", flush=True)
deadline = time.time() + hold
while time.time() < deadline:
    time.sleep(0.2)
