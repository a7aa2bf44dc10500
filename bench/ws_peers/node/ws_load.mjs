// A closed-loop WebSocket load client on Node `ws`, for bench/ws_goals.py (its echo server is
// the interop peer, crates/sockscale/tests/interop/node/ws_server.mjs).
//
//   node ws_load.mjs URL CONNS SIZE SECONDS [PIPELINE]
//
// CONNS connections, each sends PIPELINE (default 1) binary messages of SIZE bytes and then
// another for every echo that comes back (checked byte for byte), for SECONDS; prints {"messages":N,"errors":E,"seconds":S}. Compression is not
// offered (as in the sockscale runs).
import { WebSocket } from "ws";

const args = process.argv.slice(2);
const [url, conns, size, secs] = [args[0], Number(args[1]), Number(args[2]), Number(args[3])];
const pipeline = args.length === 5 ? Number(args[4]) : 1;
if ((args.length !== 4 && args.length !== 5) || !(conns >= 1 && size >= 0 && secs > 0 && pipeline >= 1)) {
  console.error("usage: node ws_load.mjs URL CONNS SIZE SECONDS [PIPELINE] (positive numbers)");
  process.exit(2);
}
load(url, conns, size, secs, pipeline);

function load(url, conns, size, secs, pipeline) {
  const payload = Buffer.alloc(size);
  for (let i = 0; i < size; i++) payload[i] = (i * 7 + 3) & 0xff;
  let messages = 0, errors = 0, stopped = false, open = 0;
  const clients = [];
  for (let i = 0; i < conns; i++) {
    const ws = new WebSocket(url, { perMessageDeflate: false });
    ws.binaryType = "nodebuffer";
    ws.on("open", () => {
      if (++open === conns) begin();
    });
    ws.on("message", (data) => {
      if (stopped) return;
      if (!payload.equals(data)) {
        errors++;
        ws.terminate();
        return;
      }
      messages++;
      ws.send(payload, { binary: true });
    });
    ws.on("error", (e) => {
      console.error(`connection: ${e.message}`);
      process.exit(1);
    });
    clients.push(ws);
  }
  function begin() {
    const began = process.hrtime.bigint();
    for (const ws of clients) for (let i = 0; i < pipeline; i++) ws.send(payload, { binary: true });
    setTimeout(() => {
      stopped = true;
      const seconds = Number(process.hrtime.bigint() - began) / 1e9;
      console.log(JSON.stringify({ messages, errors, seconds }));
      for (const ws of clients) ws.close(1000);
      setTimeout(() => process.exit(0), 200).unref();
    }, secs * 1000);
  }
}
