#!/usr/bin/env python3
"""WebSocket over HTTP/2 (RFC 8441) against `sockscale serve --proto http`, as an independent peer:
hyper-h2 for HTTP/2 (extended CONNECT) and wsproto for the WebSocket frames.

usage: ws_h2_client.py CA_FILE URL...   URL: h2c://HOST:PORT (prior knowledge) or h2://HOST:PORT
(TLS, ALPN h2). For each URL, on one connection: the server's SETTINGS must enable extended
CONNECT; two WebSockets (one with permessage-deflate) and a GET share the connection; text and
binary messages of 0, 125, 126, 65536 and 300000 octets echoed on each, a ping answered, a close
1000 echoed and the stream ended both ways; a third WebSocket is reset mid-message; a :protocol
other than websocket gets 400. Prints "URL: ok" per URL; exits 1 with one line on a failure, 2
when a module is missing.
"""
import socket
import ssl
import sys

try:
    import h2.config
    import h2.connection
    import h2.events
    import h2.settings
    from wsproto.extensions import PerMessageDeflate
    from wsproto.frame_protocol import FrameProtocol, Opcode
except ImportError as e:
    print(f"missing module: {e.name}; install: python3 -m pip install h2 wsproto", file=sys.stderr)
    sys.exit(2)

SIZES = [0, 125, 126, 65536, 300000]


class Fail(Exception):
    pass


class Conn:
    def __init__(self, url, ca):
        scheme, rest = url.split("://", 1)
        host, port = rest.rstrip("/").rsplit(":", 1)
        self.authority = f"{host}:{port}"
        self.scheme = "https" if scheme == "h2" else "http"
        sock = socket.create_connection((host, int(port)), timeout=10)
        if scheme == "h2":
            ctx = ssl.create_default_context(cafile=ca)
            ctx.set_alpn_protocols(["h2"])
            sock = ctx.wrap_socket(sock, server_hostname="localhost")
            if sock.selected_alpn_protocol() != "h2":
                raise Fail(f"ALPN chose {sock.selected_alpn_protocol()!r}, not h2")
        self.sock = sock
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.h2.initiate_connection()
        self.h2.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 24})
        self.h2.increment_flow_control_window(1 << 30)
        self.flush()
        self.streams = {}
        self.settings = None

    def flush(self):
        data = self.h2.data_to_send()
        if data:
            self.sock.sendall(data)

    def stream(self, sid):
        return self.streams.setdefault(sid, {"data": bytearray(), "ended": False, "reset": None, "headers": None})

    def pump(self):
        data = self.sock.recv(1 << 16)
        if not data:
            raise Fail("the server closed the connection")
        for ev in self.h2.receive_data(data):
            if isinstance(ev, h2.events.RemoteSettingsChanged):
                self.settings = {int(k): v.new_value for k, v in ev.changed_settings.items()}
            elif isinstance(ev, h2.events.ResponseReceived):
                self.stream(ev.stream_id)["headers"] = dict(ev.headers)
            elif isinstance(ev, h2.events.DataReceived):
                self.stream(ev.stream_id)["data"] += ev.data
                self.h2.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                self.stream(ev.stream_id)["ended"] = True
            elif isinstance(ev, h2.events.StreamReset):
                self.stream(ev.stream_id)["reset"] = ev.error_code
            elif isinstance(ev, h2.events.ConnectionTerminated):
                raise Fail(f"GOAWAY {ev.error_code}")
        self.flush()

    def until(self, done, what):
        for _ in range(100000):
            if done():
                return
            try:
                self.pump()
            except socket.timeout:
                raise Fail(f"timed out waiting for {what}")
        raise Fail(f"no end waiting for {what}")

    def send(self, sid, data, end=False):
        view = memoryview(bytes(data))
        while len(view):
            room = min(self.h2.local_flow_control_window(sid), self.h2.max_outbound_frame_size)
            if room <= 0:
                self.pump()
                continue
            self.h2.send_data(sid, bytes(view[:room]))
            view = view[room:]
            self.flush()
        if end:
            self.h2.end_stream(sid)
            self.flush()


class Ws:
    """One WebSocket on stream `sid` of `conn`."""

    def __init__(self, conn, sid, deflate):
        self.conn, self.sid = conn, sid
        pmd = PerMessageDeflate()
        headers = [
            (":method", "CONNECT"),
            (":protocol", "websocket"),
            (":scheme", conn.scheme),
            (":path", "/chat"),
            (":authority", conn.authority),
            ("sec-websocket-version", "13"),
        ]
        if deflate:
            headers.append(("sec-websocket-extensions", "permessage-deflate; " + pmd.offer()))
        conn.h2.send_headers(sid, headers)
        conn.flush()
        st = conn.stream(sid)
        conn.until(lambda: st["headers"] is not None or st["reset"] is not None, f"stream {sid}'s response")
        status = st["headers"] and st["headers"].get(":status")
        if status != "200":
            raise Fail(f"stream {sid}: status {status} (reset {st['reset']})")
        if "sec-websocket-accept" in st["headers"]:
            raise Fail("sec-websocket-accept over HTTP/2")
        ext = st["headers"].get("sec-websocket-extensions")
        if deflate and not ext:
            raise Fail("permessage-deflate was not agreed")
        extensions = []
        if ext:
            pmd.finalize(ext)
            extensions.append(pmd)
        self.proto = FrameProtocol(client=True, extensions=extensions)
        self.read = 0
        self.frames = []

    def send(self, data):
        self.conn.send(self.sid, data)

    def frame(self, what):
        """The next whole message or control frame: (opcode, payload)."""
        st = self.conn.stream(self.sid)
        parts, opcode = [], None
        while True:
            while self.frames:
                f = self.frames.pop(0)
                if f.opcode in (Opcode.PING, Opcode.PONG, Opcode.CLOSE):
                    return f.opcode, f.payload
                if f.opcode != Opcode.CONTINUATION:
                    opcode = f.opcode
                parts.append(f.payload)
                if f.message_finished:
                    payload = "".join(parts) if opcode == Opcode.TEXT else b"".join(parts)
                    return opcode, payload
            self.conn.until(lambda: len(st["data"]) > self.read or st["ended"] or st["reset"] is not None, what)
            if len(st["data"]) == self.read:
                raise Fail(f"stream {self.sid} ended (reset {st['reset']}) waiting for {what}")
            self.proto.receive_bytes(bytes(st["data"][self.read:]))
            self.read = len(st["data"])
            self.frames.extend(self.proto.received_frames())

    def echo(self, size):
        text = ("sockscale é " * (size // 12 + 1))[:size]
        binary = bytes(i % 251 for i in range(size))
        for payload in (text, binary):
            self.send(self.proto.send_data(payload, fin=True))
            opcode, got = self.frame(f"the echo of {size} on stream {self.sid}")
            want = Opcode.TEXT if isinstance(payload, str) else Opcode.BINARY
            if opcode != want or got != payload:
                raise Fail(f"stream {self.sid}: echo of {size} ({want.name}) came back as {opcode} of {len(got)}")


def run(url, ca):
    c = Conn(url, ca)
    c.until(lambda: c.settings is not None, "the server's SETTINGS")
    if c.settings.get(h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL) != 1:
        raise Fail(f"SETTINGS_ENABLE_CONNECT_PROTOCOL not 1: {c.settings}")
    plain = Ws(c, 1, deflate=False)
    deflated = Ws(c, 3, deflate=True)
    c.h2.send_headers(5, [(":method", "GET"), (":scheme", c.scheme), (":path", "/"), (":authority", c.authority)], end_stream=True)
    c.flush()
    for size in SIZES:
        plain.echo(size)
        deflated.echo(size)
    get = c.stream(5)
    c.until(lambda: get["ended"], "the GET's response")
    if get["headers"].get(":status") != "200":
        raise Fail(f"GET: {get['headers']}")
    for ws in (plain, deflated):
        ws.send(ws.proto.ping(b"p"))
        if ws.frame("a pong") != (Opcode.PONG, b"p"):
            raise Fail("no pong")
        ws.send(ws.proto.close(1000))
        opcode, payload = ws.frame("the close")
        if opcode != Opcode.CLOSE or payload[0] != 1000:
            raise Fail(f"stream {ws.sid}: close answered {opcode} {payload}")
        st = c.stream(ws.sid)
        c.until(lambda: st["ended"], "END_STREAM after the close")
        c.h2.end_stream(ws.sid)
        c.flush()
    # A WebSocket reset by the peer in the middle of a message.
    cut = Ws(c, 7, deflate=False)
    cut.send(cut.proto.send_data(b"x" * 1000, fin=True)[:500])
    c.h2.reset_stream(7)
    c.flush()
    # Another protocol: 400.
    c.h2.send_headers(9, [(":method", "CONNECT"), (":protocol", "chat"), (":scheme", c.scheme), (":path", "/"), (":authority", c.authority)])
    c.flush()
    other = c.stream(9)
    c.until(lambda: other["headers"] is not None, "the answer to :protocol chat")
    if other["headers"].get(":status") != "400":
        raise Fail(f":protocol chat: {other['headers']}")
    # The connection is still good: one more GET, then goodbye.
    c.h2.send_headers(11, [(":method", "GET"), (":scheme", c.scheme), (":path", "/"), (":authority", c.authority)], end_stream=True)
    c.flush()
    last = c.stream(11)
    c.until(lambda: last["ended"], "the last GET")
    c.h2.close_connection()
    c.flush()
    c.sock.close()


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    ca = sys.argv[1]
    for url in sys.argv[2:]:
        try:
            run(url, ca)
        except (Fail, OSError, ssl.SSLError) as e:
            print(f"{url}: {e}", file=sys.stderr)
            sys.exit(1)
        except Exception as e:  # a library's protocol error: one line, named
            print(f"{url}: {type(e).__name__}: {e}", file=sys.stderr)
            sys.exit(1)
        print(f"{url}: ok", flush=True)


if __name__ == "__main__":
    main()
