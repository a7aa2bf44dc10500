#!/usr/bin/env python3
"""A WebSocket over HTTP/2 echo server (RFC 8441) for the load_ws_h2 tests: hyper-h2 for
HTTP/2 (its SETTINGS_ENABLE_CONNECT_PROTOCOL and the :protocol pseudo-header), wsproto for
the WebSocket frames, one thread a connection. h2c with prior knowledge, or TLS with ALPN h2.

    ws_h2_server.py [--tls CERT KEY] [--unix PATH] [--no-connect-protocol] [--refuse STATUS]
                    [--reset-after N]

Prints the port it listens on (127.0.0.1, chosen by the OS; 0 with --unix, which listens on the
Unix socket PATH instead) on its first line, then serves
until killed. At each connection's end it prints one line to stderr:
    conn streams=S messages=M bytes=B closes=C resets=R
--no-connect-protocol: its SETTINGS say ENABLE_CONNECT_PROTOCOL = 0 (a server without RFC 8441).
--refuse STATUS: every CONNECT is answered STATUS (and the stream ended).
--reset-after N: a stream is reset (RST_STREAM CANCEL) after echoing N messages.
"""

import argparse
import socket
import ssl
import sys
import threading

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
from wsproto.connection import Connection, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Message, Ping, TextMessage
from wsproto.extensions import PerMessageDeflate

Codes = h2.settings.SettingCodes


class Tunnel:
    """One WebSocket on one stream."""

    def __init__(self, deflate):
        self.ws = Connection(ConnectionType.SERVER, extensions=[deflate] if deflate else [])
        self.parts = []
        self.messages = 0
        self.closed = False


def negotiate_deflate(offer):
    """The extension response for a permessage-deflate offer, and the extension, or (None, None)."""
    if not offer:
        return None, None
    for one in offer.split(","):
        if one.strip().split(";")[0].strip().lower() == "permessage-deflate":
            ext = PerMessageDeflate()
            answer = ext.accept(one.strip())
            if answer is None:
                return None, None
            if answer is True or answer == "":
                return "permessage-deflate", ext
            return "permessage-deflate; " + answer, ext
    return None, None


def serve(sock, args):
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
    conn.local_settings = h2.settings.Settings(
        client=False,
        initial_values={
            Codes.MAX_CONCURRENT_STREAMS: 100,
            Codes.ENABLE_CONNECT_PROTOCOL: 0 if args.no_connect_protocol else 1,
        },
    )
    conn.initiate_connection()
    tunnels = {}
    pending = {}  # stream -> bytes waiting for window
    totals = {"streams": 0, "messages": 0, "bytes": 0, "closes": 0, "resets": 0}

    def flush():
        for stream_id in list(pending):
            data = pending[stream_id]
            end = False
            if isinstance(data, tuple):
                data, end = data
            while data:
                room = min(conn.local_flow_control_window(stream_id), conn.max_outbound_frame_size)
                if room <= 0:
                    break
                conn.send_data(stream_id, data[:room])
                data = data[room:]
            if data:
                pending[stream_id] = (data, end)
            else:
                del pending[stream_id]
                if end:
                    conn.end_stream(stream_id)

    def send(stream_id, data, end=False):
        held = pending.get(stream_id, (b"", False))
        if not isinstance(held, tuple):
            held = (held, False)
        pending[stream_id] = (held[0] + data, held[1] or end)
        flush()

    def on_ws(stream_id, tunnel):
        for event in tunnel.ws.events():
            if isinstance(event, Message):
                tunnel.parts.append(event.data)
                if not event.message_finished:
                    continue
                whole = ("" if isinstance(event, TextMessage) else b"").join(tunnel.parts)
                tunnel.parts = []
                tunnel.messages += 1
                totals["messages"] += 1
                totals["bytes"] += len(whole)
                out = TextMessage(data=whole) if isinstance(event, TextMessage) else BytesMessage(data=whole)
                send(stream_id, tunnel.ws.send(out))
                if args.reset_after and tunnel.messages >= args.reset_after:
                    pending.pop(stream_id, None)
                    conn.reset_stream(stream_id, error_code=h2.errors.ErrorCodes.CANCEL)
                    tunnels.pop(stream_id, None)
                    totals["resets"] += 1
                    return
            elif isinstance(event, Ping):
                send(stream_id, tunnel.ws.send(event.response()))
            elif isinstance(event, CloseConnection):
                totals["closes"] += 1
                tunnel.closed = True
                send(stream_id, tunnel.ws.send(event.response()), end=True)

    try:
        while True:
            out = conn.data_to_send()
            if out:
                sock.sendall(out)
            data = sock.recv(65536)
            if not data:
                break
            try:
                events = conn.receive_data(data)
            except h2.exceptions.ProtocolError as e:
                print(f"h2 protocol error: {e}", file=sys.stderr, flush=True)
                sock.sendall(conn.data_to_send())
                break
            for event in events:
                if isinstance(event, h2.events.RequestReceived):
                    headers = dict(event.headers)
                    sid = event.stream_id
                    if headers.get(":method") != "CONNECT" or headers.get(":protocol") != "websocket":
                        conn.send_headers(sid, [(":status", "400")], end_stream=True)
                        continue
                    if args.refuse:
                        conn.send_headers(sid, [(":status", str(args.refuse))], end_stream=True)
                        continue
                    if headers.get("sec-websocket-version") != "13":
                        conn.send_headers(sid, [(":status", "400")], end_stream=True)
                        continue
                    answer, deflate = negotiate_deflate(headers.get("sec-websocket-extensions"))
                    response = [(":status", "200")]
                    if answer:
                        response.append(("sec-websocket-extensions", answer))
                    conn.send_headers(sid, response)
                    tunnels[sid] = Tunnel(deflate)
                    totals["streams"] += 1
                elif isinstance(event, h2.events.DataReceived):
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    tunnel = tunnels.get(event.stream_id)
                    if tunnel is not None and event.data:
                        tunnel.ws.receive_data(event.data)
                        on_ws(event.stream_id, tunnel)
                elif isinstance(event, h2.events.StreamEnded):
                    tunnel = tunnels.pop(event.stream_id, None)
                    if tunnel is not None and not tunnel.closed:
                        # The client ended its side without a close: end ours.
                        send(event.stream_id, b"", end=True)
                elif isinstance(event, h2.events.StreamReset):
                    tunnels.pop(event.stream_id, None)
                    pending.pop(event.stream_id, None)
                elif isinstance(event, h2.events.WindowUpdated):
                    flush()
    except (OSError, ssl.SSLError):
        pass
    finally:
        print(
            "conn streams={streams} messages={messages} bytes={bytes} closes={closes} resets={resets}".format(**totals),
            file=sys.stderr,
            flush=True,
        )
        try:
            sock.close()
        except OSError:
            pass


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    parser.add_argument("--no-connect-protocol", action="store_true")
    parser.add_argument("--refuse", type=int)
    parser.add_argument("--reset-after", type=int)
    parser.add_argument("--unix")
    args = parser.parse_args()
    context = None
    if args.tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.tls[0], args.tls[1])
        context.set_alpn_protocols(["h2"])
    if args.unix:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(args.unix)
        listener.listen(512)
        print(0, flush=True)
    else:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(512)
        print(listener.getsockname()[1], flush=True)
    while True:
        sock, _ = listener.accept()
        if not args.unix:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if context is not None:
            try:
                sock.settimeout(10)
                sock = context.wrap_socket(sock, server_side=True)
                sock.settimeout(None)
            except (OSError, ssl.SSLError):
                sock.close()
                continue
        threading.Thread(target=serve, args=(sock, args), daemon=True).start()


if __name__ == "__main__":
    main()
