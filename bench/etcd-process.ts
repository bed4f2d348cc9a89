/** A fresh single-member etcd for a benchmark (etcd.ts, scale.ts), started as test/helpers/etcd.ts starts one. */
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { captureOutput, freePort, stopChild, track } from './common.js';

export interface EtcdProc {
  endpoint: string;
  pid: number;
  root: string;
  stop(): Promise<void>;
}

/** A fresh single-member etcd in a new directory under `parent` (launch as test/helpers/etcd.ts). */
export async function startEtcd(parent: string): Promise<EtcdProc> {
  const found = spawnSync('sh', ['-c', 'command -v etcd'], { encoding: 'utf8' }).stdout.trim();
  if (!found) throw new Error('etcd is not installed (Debian: apt-get install etcd-server)');
  const root = fs.mkdtempSync(path.join(parent, 'drover-bench-etcd-'));
  const client = `http://127.0.0.1:${await freePort()}`;
  const peer = `http://127.0.0.1:${await freePort()}`;
  const child = spawn(
    found,
    [
      '--name', 'n1',
      '--data-dir', path.join(root, 'data'),
      '--listen-client-urls', client,
      '--advertise-client-urls', client,
      '--listen-peer-urls', peer,
      '--initial-advertise-peer-urls', peer,
      '--initial-cluster', `n1=${peer}`,
      '--initial-cluster-state', 'new',
      '--initial-cluster-token', 'drover-bench',
      '--logger=zap',
      '--log-level=warn',
      '--heartbeat-interval=10',
      '--election-timeout=100',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  track(child);
  const output = captureOutput(child);
  const stop = async (): Promise<void> => {
    await stopChild(child, 'SIGTERM', 10_000);
    fs.rmSync(root, { recursive: true, force: true });
  };
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      await stop();
      throw new Error(`etcd exited during startup:\n${output()}`);
    }
    const ok = await new Promise<boolean>((resolve) => {
      const req = http.get(`${client}/health`, { timeout: 1000 }, (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => resolve(res.statusCode === 200 && /"health"\s*:\s*"true"/.test(body)));
      });
      req.on('timeout', () => req.destroy());
      req.on('error', () => resolve(false));
    });
    if (ok) return { endpoint: client, pid: child.pid!, root, stop };
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`etcd not healthy after 30 s:\n${output()}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}
