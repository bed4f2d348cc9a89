/**
 * The DNS benchmark's load generator (bench/dns.ts runs it inside its network namespace):
 * `node --import tsx bench/dns-load.ts '<json>'` with `{"server":"10.43.0.10","port":53,
 * "name":"web.default.svc.cluster.local","type":"A","seconds":3,"window":8,"unique":false}`.
 * Keeps `window` queries in flight on one UDP socket for `seconds`, each reply matched by ID;
 * `unique` puts a fresh label in front of every name (`q<n>.<name>`: no cache can answer). A query
 * without a reply in 1 s counts as lost and is replaced. Prints one JSON line: answered, lost,
 * queries/s, latency p50/p99/max in ms, and the reply codes seen.
 */
import dgram from 'node:dgram';
import { performance } from 'node:perf_hooks';
import dnsPacket, { type RecordType } from 'dns-packet';

interface LoadInput {
  server: string;
  port?: number;
  name: string;
  type: RecordType;
  seconds: number;
  window: number;
  unique?: boolean;
}

const input = JSON.parse(process.argv[2] ?? '{}') as LoadInput;
const socket = dgram.createSocket('udp4');
const inFlight = new Map<number, number>();
const latencies: number[] = [];
const rcodes: Record<string, number> = {};
let lost = 0;
let sequence = 0;
let nextId = 1;
let stopping = false;

function send(): void {
  if (stopping) return;
  let id = nextId;
  while (inFlight.has(id)) id = (id % 65535) + 1;
  nextId = (id % 65535) + 1;
  const name = input.unique ? `q${sequence++}-${process.pid}.${input.name}` : input.name;
  const query = dnsPacket.encode({ type: 'query', id, flags: dnsPacket.RECURSION_DESIRED, questions: [{ name, type: input.type, class: 'IN' }] });
  inFlight.set(id, performance.now());
  socket.send(query, input.port ?? 53, input.server);
}

socket.on('message', (msg) => {
  const id = msg.readUInt16BE(0);
  const sent = inFlight.get(id);
  if (sent === undefined) return;
  inFlight.delete(id);
  latencies.push(performance.now() - sent);
  const rcode = ['NOERROR', 'FORMERR', 'SERVFAIL', 'NXDOMAIN'][msg.readUInt16BE(2) & 0xf] ?? String(msg.readUInt16BE(2) & 0xf);
  rcodes[rcode] = (rcodes[rcode] ?? 0) + 1;
  send();
});

await new Promise<void>((resolve) => socket.bind(0, () => resolve()));
const started = performance.now();
for (let i = 0; i < input.window; i++) send();
const sweeper = setInterval(() => {
  const now = performance.now();
  for (const [id, sent] of inFlight) {
    if (now - sent < 1000) continue;
    inFlight.delete(id);
    lost++;
    send();
  }
}, 200);
await new Promise((resolve) => setTimeout(resolve, input.seconds * 1000));
stopping = true;
const elapsed = (performance.now() - started) / 1000;
clearInterval(sweeper);
socket.close();
latencies.sort((a, b) => a - b);
const at = (p: number): number => latencies[Math.min(latencies.length - 1, Math.max(0, Math.ceil((p / 100) * latencies.length) - 1))] ?? NaN;
const ms = (v: number): number => Math.round(v * 1000) / 1000;
console.log(
  JSON.stringify({
    answered: latencies.length,
    lost,
    seconds: Math.round(elapsed * 1000) / 1000,
    qps: Math.round(latencies.length / elapsed),
    p50Ms: ms(at(50)),
    p99Ms: ms(at(99)),
    maxMs: ms(latencies[latencies.length - 1] ?? NaN),
    rcodes,
  }),
);
