import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { createCertificateAuthority, issueCertificate } from '../src/security/pki.js';
import { type EtcdServer, startEtcd } from './helpers/etcd.js';
import { cleanup, DROVER_BIN, request, startServer, tempDir } from './helpers/server.js';

/**
 * The server's etcd options end to end: --datastore-endpoint with --datastore-cafile/certfile/
 * keyfile against an etcd that demands client certificates, and --cluster-init without the etcd
 * binary (a clear error naming the Debian package).
 */
describe('server etcd options', () => {
  const dir = tempDir('etcd-options');
  let etcd: EtcdServer | undefined;
  after(async () => {
    await cleanup();
    await etcd?.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('--datastore-endpoint with --datastore-cafile/certfile/keyfile talks mutual TLS to etcd', async () => {
    const ca = await createCertificateAuthority('etcd-options-ca');
    const serving = await issueCertificate(ca, { commonName: 'etcd', subjectAltNames: ['127.0.0.1', 'localhost'], usage: 'server' });
    const client = await issueCertificate(ca, { commonName: 'drover', usage: 'client' });
    const file = (name: string, content: string): string => {
      const p = path.join(dir, name);
      fs.writeFileSync(p, content, { mode: 0o600 });
      return p;
    };
    const tls = {
      caFile: file('ca.pem', ca.certificatePem),
      certFile: file('server.pem', serving.certificatePem),
      keyFile: file('server-key.pem', serving.privateKeyPem),
      clientCertFile: file('client.pem', client.certificatePem),
      clientKeyFile: file('client-key.pem', client.privateKeyPem),
    };
    etcd = await startEtcd({ tls });
    const hostPort = etcd.endpoint.replace(/^https:\/\//, '');
    const server = await startServer({
      dataDir: path.join(dir, 'server'),
      handMadeNodes: true,
      args: [
        '--datastore-endpoint', `etcd://${hostPort}`,
        '--datastore-cafile', tls.caFile,
        '--datastore-certfile', tls.clientCertFile,
        '--datastore-keyfile', tls.clientKeyFile,
      ],
    });
    assert.match(server.output(), /using an external etcd datastore/);
    assert.match(server.output(), new RegExp(`https://${hostPort.replace(/\./g, '\\.')}`));
    const created = await request(server, 'POST', '/apis/coordination.k8s.io/v1/namespaces/default/leases', {
      body: { metadata: { name: 'over-tls' }, spec: { holderIdentity: 'x' } },
    });
    assert.equal(created.status, 201, created.text);
    const read = await request(server, 'GET', '/apis/coordination.k8s.io/v1/namespaces/default/leases/over-tls');
    assert.equal(read.status, 200);
    assert.equal((read.json as { spec: { holderIdentity: string } }).spec.holderIdentity, 'x');
    assert.equal(await server.stop(), 0);
  });

  it('--cluster-init without the etcd binary fails with a message naming the etcd-server package', async () => {
    // A PATH holding only node: no etcd to be found.
    const binDir = path.join(dir, 'bin');
    fs.mkdirSync(binDir, { recursive: true });
    fs.symlinkSync(process.execPath, path.join(binDir, 'node'));
    const child = spawn(
      process.execPath,
      [DROVER_BIN, 'server', '--cluster-init', '--data-dir', path.join(dir, 'no-etcd'), '--https-listen-port', '0',
        '--bind-address', '127.0.0.1', '--disable-agent', '--etcd-client-port', '1', '--etcd-peer-port', '2'],
      { env: { ...process.env, PATH: binDir }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let output = '';
    child.stdout.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr.on('data', (c: Buffer) => (output += c.toString()));
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    assert.notEqual(code, 0);
    assert.match(output, /etcd binary is not on PATH/);
    assert.match(output, /etcd-server/);
  });
});
