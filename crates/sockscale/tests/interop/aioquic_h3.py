"""Run aioquic's own HTTP/3 example client or server (http3_client.py / http3_server.py from the
aioquic sdist's examples/, unchanged) and print on stderr what their logs do not say, for the
HTTP/3 interop tests (tests/support/h3.rs):

    aioquic: handshake alpn=h3 resumed=True early_data_accepted=False
    aioquic: key_updated trigger=local_update        (or remote_update)
    aioquic: status 200 stream 0
    aioquic: listening 127.0.0.1 PORT                (server, on stdout, once bound)

Usage: aioquic_h3.py EXAMPLES_DIR client|server [--data-file F] ARGS...
--data-file F (client) sends F's bytes (ASCII) as the POST body: the client's own -d takes the body
on the command line, which the kernel limits to 128 KiB an argument.
"""

import sys
import runpy
from dataclasses import dataclass


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[2] not in ("client", "server"):
        sys.exit("usage: aioquic_h3.py EXAMPLES_DIR client|server [ARGS...]")
    examples, mode, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    if "--data-file" in args:
        at = args.index("--data-file")
        if at + 1 >= len(args):
            sys.exit("aioquic_h3.py: --data-file needs a file")
        with open(args[at + 1], "rb") as f:
            try:
                data = f.read().decode("ascii")
            except UnicodeDecodeError:
                sys.exit("aioquic_h3.py: --data-file must be ASCII (the client sends str.encode())")
        args[at : at + 2] = ["-d", data]

    import aioquic.asyncio
    import aioquic.h3.events as h3_events
    import aioquic.quic.crypto as crypto
    import aioquic.quic.events as quic_events

    def say(line: str) -> None:
        print("aioquic: " + line, file=sys.stderr, flush=True)

    @dataclass
    class HandshakeCompleted(quic_events.HandshakeCompleted):
        def __post_init__(self) -> None:
            say(
                f"handshake alpn={self.alpn_protocol} resumed={self.session_resumed} "
                f"early_data_accepted={self.early_data_accepted}"
            )

    @dataclass
    class HeadersReceived(h3_events.HeadersReceived):
        def __post_init__(self) -> None:
            for name, value in self.headers:
                if name == b":status":
                    say(f"status {value.decode()} stream {self.stream_id}")

    quic_events.HandshakeCompleted = HandshakeCompleted
    h3_events.HeadersReceived = HeadersReceived

    update_key = crypto.CryptoPair._update_key

    def logged_update_key(self, trigger: str) -> None:
        say(f"key_updated trigger={trigger}")
        update_key(self, trigger)

    crypto.CryptoPair._update_key = logged_update_key

    serve = aioquic.asyncio.serve

    async def announced_serve(*a, **kw):
        server = await serve(*a, **kw)
        host, port = server._transport.get_extra_info("sockname")[:2]
        print(f"aioquic: listening {host} {port}", flush=True)
        return server

    aioquic.asyncio.serve = announced_serve

    sys.path.insert(0, examples)
    script = f"{examples}/http3_{mode}.py"
    sys.argv = [script] + args
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
