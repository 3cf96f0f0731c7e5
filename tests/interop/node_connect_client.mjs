#!/usr/bin/env node
// HBONE client for the ferry interop tests, written against Node's built-in
// node:http2 / node:tls only (no npm packages). It plays the part of a foreign
// HBONE implementation (like ztunnel) talking to ferryd's 15008 listener:
//
//   TLS 1.3, ALPN h2, no SNI, client SVID presented, server chain verified
//   against the mesh bundle and its URI SAN compared to the expected SPIFFE ID
//   (the DNS/IP name is NOT checked, like ztunnel's IdentityVerifier);
//   then one HTTP/2 CONNECT stream per test with forwarded/baggage/traceparent.
//
// Modes:
//   echo    CONNECT :authority <dst>:<port>, expect 200, send N random bytes,
//           half-close (END_STREAM), read the echo back until the server's
//           END_STREAM and compare byte-exact.
//   reject  CONNECT with a mismatching authority IP and CONNECT to the HBONE
//           port itself; both must be answered 400 (no tunnel).
//   status  CONNECT --authority and expect --expect-status (e.g. 401 when the
//           client certificate's identity does not own the source IP).
//
// Exit 0 on success; non-zero with a "FAIL:" line otherwise.
//
// Usage:
//   node node_connect_client.mjs --mode echo|reject --ca bundle.pem --cert cert.pem
//        --key key.pem --server 127.0.6.10 --hbone-port 15008 --local 127.0.5.10
//        --expect-san spiffe://cluster.local/ns/default/sa/server
//        [--port 8080] [--bytes 4194304] [--bad-authority 127.0.6.99:8080]
//        [--windows ztunnel|default] [--timeout-ms 30000]
//        [--authority IP:PORT --expect-status N]   (mode status)

import http2 from 'node:http2';
import crypto from 'node:crypto';
import fs from 'node:fs';
import { parseArgs } from 'node:util';

const { values: opt } = parseArgs({
  options: {
    mode: { type: 'string', default: 'echo' },
    ca: { type: 'string' },
    cert: { type: 'string' },
    key: { type: 'string' },
    server: { type: 'string', default: '127.0.6.10' },
    'hbone-port': { type: 'string', default: '15008' },
    local: { type: 'string', default: '127.0.5.10' },
    'expect-san': { type: 'string', default: 'spiffe://cluster.local/ns/default/sa/server' },
    port: { type: 'string', default: '8080' },
    bytes: { type: 'string', default: String(4 * 1024 * 1024) },
    'bad-authority': { type: 'string', default: '' },
    windows: { type: 'string', default: 'ztunnel' },
    'timeout-ms': { type: 'string', default: '30000' },
    authority: { type: 'string', default: '' },
    'expect-status': { type: 'string', default: '' },
  },
  strict: true,
});

const tag = `[node-hbone ${opt.mode}]`;
function log(msg) { console.log(`${tag} ${msg}`); }
function fail(msg, code = 1) {
  console.error(`${tag} FAIL: ${msg}`);
  process.exit(code);
}

for (const k of ['ca', 'cert', 'key']) {
  if (!opt[k]) fail(`--${k} is required`, 2);
}

const watchdog = setTimeout(() => fail(`timed out after ${opt['timeout-ms']} ms`, 3),
                            Number(opt['timeout-ms']));

const MiB = 1024 * 1024;
// ztunnel's values (docs/architecture.md, "HTTP/2 settings"): 4 MiB stream window,
// 16 MiB connection window, 1 MiB max frame. "default" keeps Node's 64 KiB windows, which
// makes ferryd's flow-control (WINDOW_UPDATE) handling do much more work.
const settings = opt.windows === 'ztunnel'
  ? { initialWindowSize: 4 * MiB, maxFrameSize: MiB, enablePush: false }
  : { enablePush: false };

function connect() {
  return new Promise((resolve, reject) => {
    const expected = opt['expect-san'];
    let sanChecked = false;
    const session = http2.connect(`https://${opt.server}:${opt['hbone-port']}`, {
      ca: fs.readFileSync(opt.ca),
      cert: fs.readFileSync(opt.cert),
      key: fs.readFileSync(opt.key),
      localAddress: opt.local,
      ALPNProtocols: ['h2'],
      minVersion: 'TLSv1.3',
      maxVersion: 'TLSv1.3',
      servername: '', // no SNI, like ztunnel
      rejectUnauthorized: true,
      settings,
      // Identity check on the URI SAN instead of the host name.
      checkServerIdentity: (_host, cert) => {
        const sans = (cert.subjectaltname || '').split(/,\s*/).filter(Boolean);
        const uris = sans.filter((s) => s.startsWith('URI:')).map((s) => s.slice(4));
        if (uris.length !== 1) {
          return new Error(`server cert has ${uris.length} URI SANs (${cert.subjectaltname}), want exactly 1`);
        }
        if (uris[0] !== expected) {
          return new Error(`server URI SAN ${uris[0]} != expected ${expected}`);
        }
        sanChecked = true;
        return undefined;
      },
    });
    session.once('error', (err) => reject(new Error(`session error: ${err.message}`)));
    session.once('connect', (s, socket) => {
      const proto = socket.getProtocol();
      if (proto !== 'TLSv1.3') return reject(new Error(`negotiated ${proto}, want TLSv1.3`));
      if (socket.alpnProtocol !== 'h2') return reject(new Error(`ALPN ${socket.alpnProtocol}, want h2`));
      if (!sanChecked) return reject(new Error('checkServerIdentity was not called'));
      if (socket.localAddress !== opt.local) {
        return reject(new Error(`bound to ${socket.localAddress}, want ${opt.local}`));
      }
      if (opt.windows === 'ztunnel') s.setLocalWindowSize(16 * MiB);
      log(`connected ${socket.localAddress}:${socket.localPort} -> ${socket.remoteAddress}:${socket.remotePort} ` +
          `${proto} alpn=${socket.alpnProtocol} cipher=${socket.getCipher().name} server=${expected}`);
      resolve(s);
    });
  });
}

function hboneHeaders(authority, session) {
  const traceId = crypto.randomBytes(16).toString('hex');
  const spanId = crypto.randomBytes(8).toString('hex');
  return {
    [http2.constants.HTTP2_HEADER_METHOD]: 'CONNECT',
    [http2.constants.HTTP2_HEADER_AUTHORITY]: authority,
    forwarded: `for="${opt.local}:${session.socket.localPort}"`,
    baggage: 'k8s.cluster.name=Kubernetes,k8s.namespace.name=default,k8s.deployment.name=c1,' +
             'service.name=c1,service.version=latest',
    traceparent: `00-${traceId}-${spanId}-00`,
    // Unknown headers must be accepted and ignored (docs/hbone.md, "The CONNECT request").
    'x-interop-test': 'node-http2',
  };
}

// Opens one CONNECT stream; resolves with {status, headers, stream}.
function openConnect(session, authority) {
  return new Promise((resolve, reject) => {
    const stream = session.request(hboneHeaders(authority, session), { endStream: false });
    let settled = false;
    stream.once('response', (headers) => {
      settled = true;
      resolve({ status: headers[':status'], headers, stream });
    });
    stream.once('error', (err) => { if (!settled) { settled = true; reject(err); } });
    stream.once('close', () => {
      if (!settled) {
        settled = true;
        reject(new Error(`stream closed before a response (rstCode=${stream.rstCode})`));
      }
    });
  });
}

async function echoCase(session) {
  const authority = `${opt.server}:${opt.port}`;
  const size = Number(opt.bytes);
  const payload = crypto.randomBytes(size);
  const { status, headers, stream } = await openConnect(session, authority);
  if (Number(status) !== 200) {
    fail(`CONNECT ${authority}: :status ${status}, want 200 (headers ${JSON.stringify(headers)})`);
  }
  log(`CONNECT ${authority} -> 200`);

  const chunks = [];
  let received = 0;
  const done = new Promise((resolve, reject) => {
    stream.on('data', (c) => { chunks.push(c); received += c.length; });
    stream.once('end', resolve); // server's END_STREAM after the echo's FIN
    stream.once('error', (err) => reject(new Error(`stream error after ${received} bytes: ${err.message}`)));
    stream.once('aborted', () => reject(new Error(`stream aborted after ${received} bytes (rst ${stream.rstCode})`)));
  });
  // Write in 256 KiB pieces honouring back-pressure, then half-close.
  const piece = 256 * 1024;
  for (let off = 0; off < size; off += piece) {
    if (!stream.write(payload.subarray(off, Math.min(size, off + piece)))) {
      await new Promise((r) => stream.once('drain', r));
    }
  }
  stream.end(); // empty DATA with END_STREAM == TCP FIN at the app
  await done;

  const got = Buffer.concat(chunks);
  if (got.length !== size) fail(`echo length ${got.length}, want ${size}`);
  if (!got.equals(payload)) {
    let i = 0;
    while (i < size && got[i] === payload[i]) i++;
    fail(`echo differs from what was sent at byte ${i}`);
  }
  const sha = crypto.createHash('sha256').update(got).digest('hex').slice(0, 16);
  log(`echo ok: ${size} bytes byte-exact (sha256 ${sha}…), clean END_STREAM from server`);
}

async function expectStatus(session, authority, want, why) {
  let res;
  try {
    res = await openConnect(session, authority);
  } catch (err) {
    fail(`CONNECT ${authority} (${why}): no response, ${err.message}; want :status ${want}`);
  }
  if (Number(res.status) !== want) {
    res.stream.close(http2.constants.NGHTTP2_CANCEL);
    fail(`CONNECT ${authority} (${why}): :status ${res.status}, want ${want}`);
  }
  // A rejected CONNECT must not turn into a tunnel: the stream must end.
  await new Promise((resolve) => {
    if (res.stream.closed || res.stream.readableEnded) return resolve();
    res.stream.resume();
    res.stream.once('close', resolve);
    res.stream.once('end', resolve);
    res.stream.end();
  });
  log(`CONNECT ${authority} (${why}) -> ${want} as expected`);
}

async function rejectCase(session) {
  const bad = opt['bad-authority'] || `127.0.6.99:${opt.port}`;
  await expectStatus(session, bad, 400, 'authority IP != connection destination IP');
  await expectStatus(session, `${opt.server}:${opt['hbone-port']}`, 400, 'target is the HBONE port itself');
  // The session must still be usable after rejections (stream-level errors only).
  if (session.destroyed || session.closed) fail('session was closed after a rejected CONNECT');
}

let session;
try {
  session = await connect();
  if (opt.mode === 'echo') await echoCase(session);
  else if (opt.mode === 'reject') await rejectCase(session);
  else if (opt.mode === 'status') {
    if (!opt.authority || !opt['expect-status']) fail('--mode status needs --authority and --expect-status', 2);
    await expectStatus(session, opt.authority, Number(opt['expect-status']), 'status check');
  }
  else fail(`unknown --mode ${opt.mode}`, 2);
} catch (err) {
  fail(err.message);
}
clearTimeout(watchdog);
session.close(() => {
  log('PASS');
  process.exit(0);
});
