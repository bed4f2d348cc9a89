/**
 * A stand-in upstream resolver for cluster DNS tests and the benchmark, run inside the test's
 * network namespace (`ip netns exec <ns> node --import tsx this-file <address> <port>`). UDP and
 * TCP. It knows a few names under `example.test`:
 *   - `A www.example.test` → 192.0.2.44 (TTL 60)
 *   - `A other.example.test` → 192.0.2.45 (TTL 60)
 *   - `TXT big.example.test` → 40 strings of 60 bytes (over 512 bytes: truncated for plain UDP)
 *   - anything else → NXDOMAIN with an SOA (TTL 30)
 * It prints `{"ready":true}` and then one JSON line per query received (`{"query":name,"type":…,
 * "tcp":bool}`), so a test can count what reached the upstream (the cache's work).
 */
import dgram from 'node:dgram';
import net from 'node:net';
import dnsPacket, { type Answer, type DecodedPacket, type OptAnswer } from 'dns-packet';

const [address = '127.0.0.1', portText = '53'] = process.argv.slice(2);
const port = Number(portText);
const quiet = process.env.FAKE_DNS_QUIET === '1';

function respond(message: Buffer, tcp: boolean): Buffer | undefined {
  let query: DecodedPacket;
  try {
    query = dnsPacket.decode(message);
  } catch {
    return undefined;
  }
  const question = query.questions?.[0];
  if (!question) return undefined;
  if (!quiet) console.log(JSON.stringify({ query: question.name, type: question.type, tcp }));
  const name = question.name.toLowerCase();
  let answers: Answer[] = [];
  let rcode = 0;
  if (name === 'www.example.test' && question.type === 'A') answers = [{ name: question.name, type: 'A', ttl: 60, data: '192.0.2.44' }];
  else if (name === 'other.example.test' && question.type === 'A') answers = [{ name: question.name, type: 'A', ttl: 60, data: '192.0.2.45' }];
  else if (name === 'big.example.test' && question.type === 'TXT') {
    answers = [{ name: question.name, type: 'TXT', ttl: 60, data: Array.from({ length: 40 }, (_, i) => `${String(i).padStart(2, '0')}${'x'.repeat(58)}`) }];
  } else if (!['www.example.test', 'other.example.test', 'big.example.test'].includes(name)) rcode = 3;
  const opt = query.additionals?.find((a): a is OptAnswer => a.type === 'OPT');
  const limit = tcp ? 65535 : opt ? opt.udpPayloadSize : 512;
  const packet = {
    type: 'response' as const,
    id: query.id ?? 0,
    flags: 0x0100 | 0x0080 | rcode,
    questions: query.questions ?? [],
    answers,
    authorities: rcode === 3 || answers.length === 0
      ? [{ name: 'example.test', type: 'SOA' as const, ttl: 30, data: { mname: 'ns.example.test', rname: 'hostmaster.example.test', serial: 1, refresh: 60, retry: 60, expire: 60, minimum: 30 } }]
      : [],
  };
  const encoded = dnsPacket.encode(packet);
  if (encoded.length <= limit) return encoded;
  return dnsPacket.encode({ ...packet, flags: packet.flags | 0x0200, answers: [], authorities: [] });
}

const udp = dgram.createSocket('udp4');
udp.on('message', (msg, rinfo) => {
  const reply = respond(msg, false);
  if (reply) udp.send(reply, rinfo.port, rinfo.address);
});
const tcp = net.createServer((socket) => {
  let buffered = Buffer.alloc(0);
  socket.on('data', (chunk: Buffer) => {
    buffered = Buffer.concat([buffered, chunk]);
    while (buffered.length >= 2 && buffered.length >= 2 + buffered.readUInt16BE(0)) {
      const message = buffered.subarray(2, 2 + buffered.readUInt16BE(0));
      buffered = buffered.subarray(2 + message.length);
      const reply = respond(Buffer.from(message), true);
      if (!reply) continue;
      const length = Buffer.alloc(2);
      length.writeUInt16BE(reply.length);
      socket.write(Buffer.concat([length, reply]));
    }
  });
  socket.on('error', () => socket.destroy());
});
await new Promise<void>((resolve) => udp.bind({ address, port }, () => resolve()));
await new Promise<void>((resolve) => tcp.listen({ host: address, port }, () => resolve()));
console.log(JSON.stringify({ ready: true }));
process.on('SIGTERM', () => process.exit(0));
