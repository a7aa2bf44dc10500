// Interop client: Node `ws` against `sockscale serve --proto ws`.
//
// Usage: node ws_client.mjs CA_FILE URL... (ws:// or wss://). For each URL, with and without
// permessage-deflate: echoes text and binary messages of every size in SIZES byte for byte,
// pings, and closes with 1000 expecting 1000 back. Prints one line per run; on any mismatch
// prints one line and exits 1.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import WebSocket from 'ws';

const SIZES = [0, 125, 126, 65536, 1 << 20];
const VERSION = createRequire(import.meta.url)('ws/package.json').version;

// A seeded xorshift, so every run sends the same bytes.
function bytes(seed, size) {
  let x = (seed * 2654435761 + 1) >>> 0 || 1;
  const out = Buffer.alloc(size);
  for (let i = 0; i < size; i++) {
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    out[i] = x >>> 24;
  }
  return out;
}

const LETTERS = 'abcdefghijklmnopqrstuvwxyz0123456789 ';
const MESSAGES = SIZES.flatMap((size) => [
  { name: `text ${size} B`, binary: false, data: Buffer.from(Array.from(bytes(size + 1, size), (b) => LETTERS[b % LETTERS.length]).join(''), 'ascii') },
  { name: `binary ${size} B`, binary: true, data: bytes(size + 2, size) },
]);

function run(url, ca, deflate) {
  const label = `${url.split(':')[0]} deflate=${deflate ? 'on' : 'off'}`;
  return new Promise((resolve, reject) => {
    const fail = (why) => { ws.terminate(); reject(new Error(`${label}: ${why}`)); };
    const timer = setTimeout(() => fail('no end within 30 s'), 30_000);
    const ws = new WebSocket(url, {
      ca,
      servername: 'localhost',
      // threshold 0: compress every message, the empty one too.
      perMessageDeflate: deflate ? { threshold: 0 } : false,
      maxPayload: 2 << 20,
    });
    let next = 0;
    let state = 'echo';
    const sendNext = () => {
      const m = MESSAGES[next];
      ws.send(m.binary ? m.data : m.data.toString('ascii'), { binary: m.binary });
    };
    ws.on('open', () => {
      const negotiated = ws.extensions;
      if (deflate !== negotiated.includes('permessage-deflate')) return fail(`Sec-WebSocket-Extensions "${negotiated}"`);
      sendNext();
    });
    ws.on('message', (data, isBinary) => {
      const m = MESSAGES[next];
      if (state !== 'echo' || !m) return fail(`an unasked message of ${data.length} B`);
      if (isBinary !== m.binary || !data.equals(m.data)) {
        let at = 0;
        while (at < data.length && at < m.data.length && data[at] === m.data[at]) at++;
        return fail(`${m.name}: echo is ${isBinary ? 'binary' : 'text'} of ${data.length} B, first difference at byte ${at}`);
      }
      next++;
      if (next < MESSAGES.length) return sendNext();
      state = 'ping';
      ws.ping(Buffer.from('interop'));
    });
    ws.on('pong', (data) => {
      if (state !== 'ping' || data.toString() !== 'interop') return fail(`an unasked pong "${data}"`);
      state = 'close';
      ws.close(1000);
    });
    ws.on('error', (e) => fail(e.message));
    ws.on('close', (code, reason) => {
      clearTimeout(timer);
      if (state !== 'close') return reject(new Error(`${label}: closed with ${code} "${reason}" while in ${state}, after ${next} echoes`));
      if (code !== 1000) return reject(new Error(`${label}: sent close 1000, received ${code} "${reason}"`));
      console.log(`node ws ${VERSION} ${label}: ${MESSAGES.length} echoes, ping, close 1000: ok`);
      resolve();
    });
  });
}

if (process.argv.length < 4) {
  console.error('usage: node ws_client.mjs CA_FILE URL...');
  process.exit(2);
}
const [caFile, ...urls] = process.argv.slice(2);
try {
  const ca = readFileSync(caFile);
  for (const url of urls) {
    for (const deflate of [false, true]) await run(url, ca, deflate);
  }
} catch (e) {
  console.log(`node ws: FAILED: ${e.message}`);
  process.exit(1);
}
