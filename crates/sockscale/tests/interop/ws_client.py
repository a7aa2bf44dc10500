"""Interop client: Python `websockets` (asyncio API) against `sockscale serve --proto ws`.

Usage: ws_client.py CA_FILE URL... (ws:// or wss://). For each URL, with and without
permessage-deflate: echoes text and binary messages of every size in SIZES byte for byte, pings,
and closes with 1000 expecting 1000 back. Prints one line per run; on any mismatch prints one line
and exits 1.

The asyncio client, not the sync one: the sync client reads an SSL socket in one thread while
writing it from another, and over TLS about one connection in a hundred never sends its upgrade
request (seen here with Python 3.11.7 and websockets 17.4: the client had sent only its
handshake's 597 bytes, the server had sent all of its own and waited).
"""

import asyncio
import random
import ssl
import sys

import websockets
from websockets.asyncio.client import connect

SIZES = [0, 125, 126, 65536, 1 << 20]
LIMIT = 30  # seconds for every run together; one takes well under one


def binary(size):
    """Seeded pseudo-random bytes: every byte value, nothing deflate shrinks much."""
    return random.Random(size).randbytes(size)


def text(size):
    """ASCII (valid UTF-8) that does not repeat with a short period."""
    rng = random.Random(size + 1)
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789 ") for _ in range(size))


MESSAGES = [(kind, size, data) for size in SIZES for kind, data in (("text", text(size)), ("binary", binary(size)))]

# What the client is doing, for the line when it does not finish in time.
step = "starting"


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


async def run(url, ca_file, deflate):
    global step
    label = f"{url.split(':')[0]} deflate={'on' if deflate else 'off'}"
    step = f"{label}: opening"
    tls = None
    if url.startswith("wss:"):
        tls = ssl.create_default_context(cafile=ca_file)
    async with connect(
        url,
        ssl=tls,
        server_hostname="localhost" if tls else None,
        compression="deflate" if deflate else None,
        max_size=None,
        open_timeout=10,
        close_timeout=10,
    ) as ws:
        extensions = [type(e).__name__ for e in ws.protocol.extensions]
        if deflate and not extensions:
            raise AssertionError(f"{label}: permessage-deflate offered but not negotiated")
        if not deflate and extensions:
            raise AssertionError(f"{label}: extensions {extensions} negotiated unasked")
        for kind, size, data in MESSAGES:
            step = f"{label}: sending {kind} {size} B"
            await ws.send(data)
            step = f"{label}: receiving the echo of {kind} {size} B"
            echo = await ws.recv()
            if type(echo) is not type(data) or echo != data:
                at = first_difference(echo, data) if type(echo) is type(data) else 0
                raise AssertionError(
                    f"{label}: {kind} {size} B: echo is {type(echo).__name__} of {len(echo)} B, "
                    f"first difference at byte {at}"
                )
        step = f"{label}: ping"
        await (await ws.ping(b"interop"))
        step = f"{label}: close"
        await ws.close(1000)
        received = ws.protocol.close_rcvd
        if received is None or received.code != 1000:
            raise AssertionError(f"{label}: sent close 1000, received {received}")
    print(f"python websockets {websockets.__version__} {label}: {len(MESSAGES)} echoes, ping, close 1000: ok")


async def run_all(ca_file, urls):
    for url in urls:
        for deflate in (False, True):
            await run(url, ca_file, deflate)


def main():
    if len(sys.argv) < 3:
        print("usage: ws_client.py CA_FILE URL...", file=sys.stderr)
        return 2
    ca_file, urls = sys.argv[1], sys.argv[2:]
    try:
        asyncio.run(asyncio.wait_for(run_all(ca_file, urls), LIMIT))
    except TimeoutError:
        print(f"python websockets: FAILED: not done within {LIMIT} s, stuck at: {step}")
        return 1
    except Exception as e:  # noqa: BLE001 - any failure is one line and exit 1
        print(f"python websockets: FAILED: {e if isinstance(e, AssertionError) else repr(e)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
