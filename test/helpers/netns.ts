import { execFileSync } from 'node:child_process';

/**
 * A small test network of "hosts": network namespaces joined by a bridge in the test's own
 * namespace, one /24 of 10.214.0.0/16 per run (chosen by PID so parallel runs do not collide).
 * The bridge holds `.1` (where a server started in the host namespace is reached), namespace i
 * holds `.(10 + i)`. Everything is named after the run and removed by `remove()`, which also
 * kills what still runs inside the namespaces. Needs root and iproute2.
 */

export interface TestHost {
  netns: string;
  ip: string;
}

export interface TestNetwork {
  hostIp: string;
  hosts: TestHost[];
  /** Kill whatever runs in the namespaces, delete them, the veths and the bridge. Safe to repeat. */
  remove(): void;
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

/** `tag`: a letter or two, so two networks of one test process get distinct names. */
export function createTestNetwork(count: number, tag = 'a'): TestNetwork {
  const suffix = `${process.pid % 10000}${tag}`;
  const subnet = 10 + (process.pid % 200);
  const third = tag === 'a' ? subnet : (subnet + 100 + tag.charCodeAt(0)) % 250;
  const bridge = `dvb${suffix}`;
  const hostIp = `10.214.${third}.1`;
  const hosts: TestHost[] = [];
  const remove = (): void => {
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
  remove();
  try {
    ip('link', 'add', bridge, 'type', 'bridge');
    ip('addr', 'add', `${hostIp}/24`, 'dev', bridge);
    ip('link', 'set', bridge, 'up');
    for (let i = 0; i < count; i++) {
      const netns = `drover-t${suffix}-${i}`;
      const hostVeth = `dvh${suffix}${i}`;
      const address = `10.214.${third}.${10 + i}`;
      ip('netns', 'add', netns);
      ip('link', 'add', hostVeth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', netns);
      ip('link', 'set', hostVeth, 'master', bridge);
      ip('link', 'set', hostVeth, 'up');
      ip('netns', 'exec', netns, 'ip', 'addr', 'add', `${address}/24`, 'dev', 'eth0');
      ip('netns', 'exec', netns, 'ip', 'link', 'set', 'eth0', 'up');
      ip('netns', 'exec', netns, 'ip', 'link', 'set', 'lo', 'up');
      ip('netns', 'exec', netns, 'ip', 'route', 'add', 'default', 'via', hostIp);
      hosts.push({ netns, ip: address });
    }
  } catch (error) {
    remove();
    throw error;
  }
  return { hostIp, hosts, remove };
}

/** Run a command inside a namespace (synchronously); its stdout. */
export function inNetns(netns: string, argv: string[], timeoutMs = 30_000): string {
  return execFileSync('ip', ['netns', 'exec', netns, ...argv], { stdio: ['ignore', 'pipe', 'pipe'], timeout: timeoutMs }).toString();
}
