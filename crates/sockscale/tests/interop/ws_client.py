"""Interop client: Python `websockets` (sync API) against `sockscale serve --proto ws`.

Usage: ws_client.py CA_FILE URL... (ws:// or wss://). For each URL, with and without permessage-deflate:
echoes text and binary messages of every size in SIZES byte for byte, pings, and closes with 1000
expecting 1000 back. Prints one line per run; on any mismatch prints one line and exits 1.
"""

import random
import ssl
import sys

import websockets
from websockets.sync.client import connect

SIZES = [0, 125, 126, 65536, 1 << 20]


def binary(size):
    """Seeded pseudo-random bytes: every byte value, nothing deflate shrinks much."""
    return random.Random(size).randbytes(size)


def text(size):
    """ASCII (valid UTF-8) that does not repeat with a short period."""
    rng = random.Random(size + 1)
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789 ") for _ in range(size))


MESSAGES = [(kind, size, data) for size in SIZES for kind, data in (("text", text(size)), ("binary", binary(size)))]


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def run(url, ca_file, deflate):
    label = f"{url.split(':')[0]} deflate={'on' if deflate else 'off'}"
    tls = None
    if url.startswith("wss:"):
        tls = ssl.create_default_context(cafile=ca_file)
    with connect(
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
            ws.send(data)
            echo = ws.recv(timeout=10)
            if type(echo) is not type(data) or echo != data:
                at = first_difference(echo, data) if type(echo) is type(data) else 0
                raise AssertionError(
                    f"{label}: {kind} {size} B: echo is {type(echo).__name__} of {len(echo)} B, "
                    f"first difference at byte {at}"
                )
        if not ws.ping(b"interop").wait(10):
            raise AssertionError(f"{label}: no pong within 10 s")
        ws.close(1000)
        received = ws.protocol.close_rcvd
        if received is None or received.code != 1000:
            raise AssertionError(f"{label}: sent close 1000, received {received}")
    print(f"python websockets {websockets.__version__} {label}: {len(MESSAGES)} echoes, ping, close 1000: ok")


def main():
    if len(sys.argv) < 3:
        print("usage: ws_client.py CA_FILE URL...", file=sys.stderr)
        return 2
    ca_file, urls = sys.argv[1], sys.argv[2:]
    try:
        for url in urls:
            for deflate in (False, True):
                run(url, ca_file, deflate)
    except Exception as e:  # noqa: BLE001 - any failure is one line and exit 1
        print(f"python websockets: FAILED: {e if isinstance(e, AssertionError) else repr(e)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
