import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/**
 * A small test network of "hosts": network namespaces joined by a bridge in the test's own
 * namespace, on a /24 of 10.214.0.0/16 claimed for the network's lifetime (below). The bridge
 * holds `.1` (where a server started in the host namespace is reached), namespace i holds
 * `.(10 + i)`. Everything is named after the run and removed by `remove()`, which also kills what
 * still runs inside the namespaces and gives the /24 back. Needs root and iproute2. Every test and
 * bench that needs namespaces builds them here.
 */

export interface TestHost {
  netns: string;
  ip: string;
  /** The host-side end of the namespace's veth: `ip link set <hostVeth> down` cuts the host off. */
  hostVeth: string;
}

export interface TestNetwork {
  hostIp: string;
  /** The /24's first three octets, for addresses of the test's own choosing (`${prefix}.77`). */
  prefix: string;
  hosts: TestHost[];
  /** Kill whatever runs in the namespaces, delete them, the veths and the bridge. Safe to repeat. */
  remove(): void;
}

export interface TestNetworkOptions {
  /** A letter or two, so two networks of one test process get distinct names (default `a`). */
  tag?: string;
  /**
   * A default route via the bridge (default true). Without it a namespace reaches only the /24:
   * what a test sends elsewhere fails at once instead of leaving through the host.
   */
  defaultRoute?: boolean;
}

function ip(...args: string[]): string {
  return execFileSync('ip', args, { stdio: ['ignore', 'pipe', 'pipe'] }).toString();
}

function quiet(fn: () => unknown): void {
  try {
    fn();
  } catch {
    // already gone
  }
}

export function netnsProblem(): string | undefined {
  if (process.getuid?.() !== 0) return 'needs root to create network namespaces';
  try {
    execFileSync('ip', ['-V'], { stdio: 'pipe' });
  } catch {
    return 'needs the ip command (iproute2)';
  }
  return undefined;
}

const CLAIMS_DIR = path.join(os.tmpdir(), 'drover-test-subnets');

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * A third octet no other live test process holds: test files run two at a time, and two bridges
 * with one /24 in the host's namespace would route each other's traffic. A claim is a file named
 * for the octet holding the claimer's PID, made with O_EXCL; a claim whose process is gone is taken over.
 */
function claimSubnet(): { third: number; release(): void } {
  fs.mkdirSync(CLAIMS_DIR, { recursive: true });
  const start = process.pid % 240;
  for (let i = 0; i < 240; i++) {
    const third = 10 + ((start + i) % 240);
    const file = path.join(CLAIMS_DIR, String(third));
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        fs.writeFileSync(file, String(process.pid), { flag: 'wx' });
        return { third, release: () => fs.readFileSync(file, 'utf8') === String(process.pid) && fs.rmSync(file, { force: true }) };
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
        const owner = Number(fs.readFileSync(file, 'utf8'));
        if (owner > 0 && alive(owner)) break;
        fs.rmSync(file, { force: true }); // a claim left by a process that is gone
      }
    }
  }
  throw new Error(`no free /24 in 10.214.0.0/16 for a test network (claims in ${CLAIMS_DIR})`);
}

export function createTestNetwork(count: number, options: TestNetworkOptions | string = {}): TestNetwork {
  const { tag = 'a', defaultRoute = true } = typeof options === 'string' ? { tag: options } : options;
  const suffix = `${process.pid % 10000}${tag}`;
  const claim = claimSubnet();
  const prefix = `10.214.${claim.third}`;
  const bridge = `dvb${suffix}`;
  const hostIp = `${prefix}.1`;
  const hosts: TestHost[] = [];
  const removeLinks = (): void => {
    for (let i = 0; i < count; i++) {
      const netns = `drover-t${suffix}-${i}`;
      quiet(() => {
        const pids = ip('netns', 'pids', netns).split('\n').filter(Boolean);
        for (const pid of pids) quiet(() => process.kill(Number(pid), 'SIGKILL'));
      });
      quiet(() => ip('netns', 'del', netns));
      quiet(() => ip('link', 'del', `dvh${suffix}${i}`));
    }
    quiet(() => ip('link', 'del', bridge));
  };
  const remove = (): void => {
    removeLinks();
    quiet(() => claim.release());
  };
  removeLinks();
  try {
    ip('link', 'add', bridge, 'type', 'bridge');
    ip('addr', 'add', `${hostIp}/24`, 'dev', bridge);
    ip('link', 'set', bridge, 'up');
    for (let i = 0; i < count; i++) {
      const netns = `drover-t${suffix}-${i}`;
      const hostVeth = `dvh${suffix}${i}`;
      const address = `${prefix}.${10 + i}`;
      ip('netns', 'add', netns);
      ip('link', 'add', hostVeth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', netns);
      ip('link', 'set', hostVeth, 'master', bridge);
      ip('link', 'set', hostVeth, 'up');
      ip('netns', 'exec', netns, 'ip', 'addr', 'add', `${address}/24`, 'dev', 'eth0');
      ip('netns', 'exec', netns, 'ip', 'link', 'set', 'eth0', 'up');
      ip('netns', 'exec', netns, 'ip', 'link', 'set', 'lo', 'up');
      if (defaultRoute) ip('netns', 'exec', netns, 'ip', 'route', 'add', 'default', 'via', hostIp);
      hosts.push({ netns, ip: address, hostVeth });
    }
  } catch (error) {
    remove();
    throw error;
  }
  return { hostIp, prefix, hosts, remove };
}

/** Run a command inside a namespace (synchronously); its stdout. */
export function inNetns(netns: string, argv: string[], timeoutMs = 30_000): string {
  return execFileSync('ip', ['netns', 'exec', netns, ...argv], { stdio: ['ignore', 'pipe', 'pipe'], timeout: timeoutMs }).toString();
}
