/**
 * One DNS query with dns-packet, over UDP or TCP, printed as JSON: for tests that must see the
 * wire (TTL, flags such as AA and TC, the authority section) from inside a network namespace
 * (`ip netns exec <ns> node --import tsx this-file '<json>'`).
 * Input: `{"server":"10.43.0.10","name":"…","type":"A","tcp":false,"edns":4096}` (edns: send an OPT
 * record offering that UDP size). Output: `{"rcode":…,"aa":…,"tc":…,"answers":[…],"authorities":[…],
 * "additionals":[…],"bytes":n}`.
 */
import dgram from 'node:dgram';
import net from 'node:net';
import dnsPacket, { type Packet, type RecordType } from 'dns-packet';

interface QueryInput {
  server: string;
  port?: number;
  name: string;
  type: RecordType;
  tcp?: boolean;
  edns?: number;
}

const input = JSON.parse(process.argv[2] ?? '{}') as QueryInput;
const query: Packet = {
  type: 'query',
  id: Math.floor(Math.random() * 65536),
  flags: dnsPacket.RECURSION_DESIRED,
  questions: [{ name: input.name, type: input.type, class: 'IN' }],
  additionals: input.edns ? [{ name: '.', type: 'OPT', udpPayloadSize: input.edns, extendedRcode: 0, ednsVersion: 0, flags: 0, flag_do: false, options: [] }] : [],
};
const port = input.port ?? 53;

function viaUdp(): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const socket = dgram.createSocket('udp4');
    const timer = setTimeout(() => reject(new Error('no UDP answer in 10 s')), 10_000);
    socket.on('message', (msg) => {
      clearTimeout(timer);
      socket.close();
      resolve(msg);
    });
    socket.send(dnsPacket.encode(query), port, input.server);
  });
}

function viaTcp(): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: input.server, port }, () => socket.write(dnsPacket.streamEncode(query)));
    let received = Buffer.alloc(0);
    const timer = setTimeout(() => reject(new Error('no TCP answer in 10 s')), 10_000);
    socket.on('data', (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      if (received.length >= 2 && received.length >= 2 + received.readUInt16BE(0)) {
        clearTimeout(timer);
        socket.destroy();
        resolve(received.subarray(2, 2 + received.readUInt16BE(0)));
      }
    });
    socket.on('error', reject);
  });
}

const raw = await (input.tcp ? viaTcp() : viaUdp());
const reply = dnsPacket.decode(raw);
console.log(
  JSON.stringify({
    id: reply.id === query.id,
    rcode: (reply as { rcode?: string }).rcode,
    aa: reply.flag_aa,
    tc: reply.flag_tc,
    ra: reply.flag_ra,
    questions: reply.questions,
    answers: reply.answers,
    authorities: reply.authorities,
    additionals: reply.additionals,
    bytes: raw.length,
  }),
);
