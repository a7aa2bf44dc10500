// Interop and benchmark peer: a Node `ws` echo server.
//
// Usage (after `npm ci` in crates/sockscale/tests/interop/node):
//   node ws_server.mjs ADDR [CERT_FILE KEY_FILE]
// e.g. `node ws_server.mjs 127.0.0.1:9002` (ws://) or `node ws_server.mjs 127.0.0.1:0 cert.pem key.pem`
// (wss://). Listens on ADDR (HOST:PORT; port 0: one the OS picks), prints the bound address
// (`127.0.0.1:PORT`) on one line once it accepts, then echoes every message as received (text as
// text, binary as binary), answers pings and closes (the library does); permessage-deflate is
// agreed when a client offers it. Runs until killed.
import { readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { WebSocketServer } from 'ws';

const args = process.argv.slice(2);
if (args.length !== 1 && args.length !== 3) {
  console.error('usage: node ws_server.mjs ADDR [CERT_FILE KEY_FILE]');
  process.exit(2);
}
const at = args[0].lastIndexOf(':');
const host = args[0].slice(0, at).replace(/^\[(.*)\]$/, '$1');
const port = Number(args[0].slice(at + 1));
if (at < 0 || !Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`ws_server: ADDR must be HOST:PORT, not "${args[0]}"`);
  process.exit(2);
}
const server = args.length === 3
  ? https.createServer({ cert: readFileSync(args[1]), key: readFileSync(args[2]) })
  : http.createServer();
const wss = new WebSocketServer({
  server,
  // Agreed when offered; threshold 0 compresses every message, the empty one too.
  perMessageDeflate: { threshold: 0 },
  maxPayload: 64 << 20,
});
wss.on('connection', (ws) => {
  ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary }));
  ws.on('error', () => ws.terminate());
});
server.on('error', (e) => {
  console.error(`ws_server: ${e.message}`);
  process.exit(1);
});
server.listen(port, host, () => {
  const bound = server.address();
  const shown = bound.family === 'IPv6' ? `[${bound.address}]` : bound.address;
  console.log(`${shown}:${bound.port}`);
});
