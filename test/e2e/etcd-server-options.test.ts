import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { type EtcdServer, startEtcd, writeEtcdTls } from '../helpers/etcd.js';
import { runDrover } from '../helpers/agent.js';
import { cleanup, request, serverArgs, startServer, tempDir } from '../helpers/server.js';

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
    const tls = await writeEtcdTls(dir, 'etcd-options-ca');
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
    const result = await runDrover(
      serverArgs(path.join(dir, 'no-etcd'), { args: ['--cluster-init', '--etcd-client-port', '1', '--etcd-peer-port', '2'] }),
      30_000,
      { env: { ...process.env, PATH: binDir } },
    );
    const output = result.stdout + result.stderr;
    assert.notEqual(result.code, 0);
    assert.match(output, /etcd binary is not on PATH/);
    assert.match(output, /etcd-server/);
  });
});
