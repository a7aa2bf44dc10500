"""Interop and benchmark peer: a Python `websockets` (asyncio) echo server.

Usage: python3 ws_server.py ADDR [CERT_FILE KEY_FILE]
e.g. `python3 ws_server.py 127.0.0.1:9003` (ws://) or `python3 ws_server.py 127.0.0.1:0 cert.pem key.pem`
(wss://). Listens on ADDR (HOST:PORT; port 0: one the OS picks), prints the bound address
(`127.0.0.1:PORT`) on one line once it accepts, then echoes every message as received (text as
text, binary as binary), answers pings and closes (the library does); permessage-deflate is agreed
when a client offers it. Runs until killed. Needs websockets >= 13 (`pip install websockets`).
"""

import asyncio
import ssl
import sys

from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed


async def echo(ws):
    # A str echoes as text, bytes as binary; the loop ends at the close, which websockets answers.
    try:
        async for message in ws:
            await ws.send(message)
    except ConnectionClosed:
        # A client that ends without a close (a benchmark's, cut off) is no error of the server's.
        pass


async def main(addr, tls):
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        sys.exit(f"ws_server: ADDR must be HOST:PORT, not {addr!r}")
    context = None
    if tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls)
    async with serve(
        echo,
        host.strip("[]"),
        int(port),
        ssl=context,
        compression="deflate",
        max_size=64 << 20,
        # No keepalive pings of its own: a benchmark's idle client need not answer them.
        ping_interval=None,
    ) as server:
        bound = server.sockets[0].getsockname()
        shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        print(f"{shown}:{bound[1]}", flush=True)
        await asyncio.Future()


if __name__ == "__main__":
    if len(sys.argv) not in (2, 4):
        sys.exit("usage: python3 ws_server.py ADDR [CERT_FILE KEY_FILE]")
    try:
        asyncio.run(main(sys.argv[1], sys.argv[2:]))
    except KeyboardInterrupt:
        pass
