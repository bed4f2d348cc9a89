/**
 * The serving side of bench/registry-peer-pull.ts, in a process of its own (as a peer is another
 * node): a node's embedded registry (RegistryServer over the store the parent built, behind TLS
 * that requires a node-CA client certificate, as the agent port does) and a test upstream
 * registry (test/helpers/registry.ts) holding the same blobs in memory. Prints one JSON line with
 * both URLs, then serves until killed.
 *
 *   node --import tsx bench/registry-peer-serve.ts <spec.json>
 */
import fs from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { RegistryServer } from '../src/images/registry-server/server.js';
import { ImageStore } from '../src/images/store.js';
import { createLogger } from '../src/logging/logger.js';
import { startRegistry } from '../test/helpers/registry.js';

interface Spec {
  storeRoot: string;
  repository: string;
  tag: string;
  manifestDigest: string;
  manifestMediaType: string;
  blobs: string[];
  tls: { ca: string; cert: string; key: string };
}

async function main(): Promise<void> {
  const spec = JSON.parse(fs.readFileSync(process.argv[2]!, 'utf8')) as Spec;
  const store = new ImageStore(spec.storeRoot);
  const registry = new RegistryServer({ store: () => store, logger: createLogger('warn') });
  const server = https.createServer({ ...spec.tls, requestCert: true, rejectUnauthorized: true }, (req, res) => registry.handle(req, res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const upstream = await startRegistry();
  for (const digest of spec.blobs) upstream.addBlob(fs.readFileSync(store.blobFile(digest)));
  upstream.addManifest(spec.repository, spec.tag, spec.manifestMediaType, fs.readFileSync(store.blobFile(spec.manifestDigest)));
  console.log(JSON.stringify({ peer: `https://127.0.0.1:${(server.address() as AddressInfo).port}`, upstream: upstream.url, upstreamCa: upstream.caFile }));
}

void main();
