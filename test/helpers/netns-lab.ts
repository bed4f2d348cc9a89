/**
 * A small network in namespaces for the Service datapath's tests and bench: a "node" namespace
 * with a bridge `br0` (the pod CIDR's gateway 10.42.0.1/24, hairpin on every port), "pods" each in
 * their own namespace on that bridge, a "client" pod, and an "outside" host on a second link
 * (192.168.77.2 -> the node's 192.168.77.1, which is the node address node ports answer on). The
 * node forwards (ip_forward, bridge-nf-call-iptables in its namespace only), and routes by default
 * to the outside host so the node's own connections to Service addresses have a route.
 *
 * Names are `drover-t<pid>-<tag>-…`; destroy() kills what was started in them and deletes them
 * (a deleted node namespace takes its bridge, veths and nft tables with it). Nothing is created in
 * the host's network namespace.
 */
import { type ChildProcess, execFile, execFileSync, spawn } from 'node:child_process';

export const LAB_POD_CIDR = '10.42.0.0/24';
export const LAB_GATEWAY = '10.42.0.1';
export const LAB_NODE_IP = '192.168.77.1';
export const LAB_OUTSIDE_IP = '192.168.77.2';

export interface LabHost {
  netns: string;
  ip: string;
}

export interface NetnsLab {
  node: string;
  pods: LabHost[];
  client: LabHost;
  outside: LabHost;
  /** `ip netns exec <node> nft`: the nft command prefix for the node's namespace. */
  nft: string[];
  /** Runs a command in a namespace; resolves with its exit code and output (never rejects on exit codes). */
  exec(netns: string, args: readonly string[], timeoutMs?: number): Promise<{ code: number; stdout: string; stderr: string }>;
  /** Starts a long-running command in a namespace; killed by destroy(). */
  spawn(netns: string, args: readonly string[]): ChildProcess;
  destroy(): void;
}

function ip(...args: string[]): void {
  execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
}

/** Whether this process may build namespaces (root, `ip`, `nft`); a reason to skip otherwise. */
export function netnsLabUnavailable(): string | undefined {
  if (process.getuid?.() !== 0) return 'needs root (network namespaces)';
  for (const [tool, flag] of [['ip', '-V'], ['nft', '--version'], ['busybox', 'true']] as const) {
    try {
      execFileSync(tool, [flag], { stdio: 'ignore' });
    } catch {
      return `needs ${tool}`;
    }
  }
  return undefined;
}

export function createNetnsLab(tag: string, podCount: number): NetnsLab {
  const prefix = `drover-t${process.pid}-${tag}`;
  const node = `${prefix}-node`;
  const created: string[] = [];
  const children = new Set<ChildProcess>();
  const lab: NetnsLab = {
    node,
    pods: Array.from({ length: podCount }, (_, i) => ({ netns: `${prefix}-p${i}`, ip: `10.42.0.${10 + i}` })),
    client: { netns: `${prefix}-cl`, ip: '10.42.0.100' },
    outside: { netns: `${prefix}-out`, ip: LAB_OUTSIDE_IP },
    nft: ['ip', 'netns', 'exec', node, 'nft'],
    exec: (netns, args, timeoutMs = 60_000) =>
      new Promise((resolve) => {
        execFile('ip', ['netns', 'exec', netns, ...args], { timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024 }, (error, stdout, stderr) => {
          const code = error ? (typeof (error as { code?: unknown }).code === 'number' ? ((error as { code: number }).code) : -1) : 0;
          resolve({ code, stdout, stderr });
        });
      }),
    spawn: (netns, args) => {
      const child = spawn('ip', ['netns', 'exec', netns, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
      children.add(child);
      child.once('exit', () => children.delete(child));
      return child;
    },
    destroy: () => {
      for (const child of children) child.kill('SIGKILL');
      for (const netns of created.reverse()) {
        try {
          ip('netns', 'del', netns);
        } catch {
          // already gone
        }
      }
    },
  };
  try {
    for (const netns of [node, ...lab.pods.map((p) => p.netns), lab.client.netns, lab.outside.netns]) {
      ip('netns', 'add', netns);
      created.push(netns);
      ip('-n', netns, 'link', 'set', 'lo', 'up');
    }
    ip('-n', node, 'link', 'add', 'br0', 'type', 'bridge');
    ip('-n', node, 'addr', 'add', `${LAB_GATEWAY}/24`, 'dev', 'br0');
    ip('-n', node, 'link', 'set', 'br0', 'up');
    [...lab.pods, lab.client].forEach((pod, i) => {
      const port = `vp${i}`;
      ip('-n', node, 'link', 'add', port, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', pod.netns);
      ip('-n', node, 'link', 'set', port, 'master', 'br0', 'up');
      // A pod reaching itself through a Service: the frame goes back out the port it came in.
      ip('-n', node, 'link', 'set', port, 'type', 'bridge_slave', 'hairpin', 'on');
      ip('-n', pod.netns, 'addr', 'add', `${pod.ip}/24`, 'dev', 'eth0');
      ip('-n', pod.netns, 'link', 'set', 'eth0', 'up');
      ip('-n', pod.netns, 'route', 'add', 'default', 'via', LAB_GATEWAY);
    });
    ip('-n', node, 'link', 'add', 'ext0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', lab.outside.netns);
    ip('-n', node, 'addr', 'add', `${LAB_NODE_IP}/24`, 'dev', 'ext0');
    ip('-n', node, 'link', 'set', 'ext0', 'up');
    ip('-n', lab.outside.netns, 'addr', 'add', `${LAB_OUTSIDE_IP}/24`, 'dev', 'eth0');
    ip('-n', lab.outside.netns, 'link', 'set', 'eth0', 'up');
    ip('-n', lab.outside.netns, 'route', 'add', 'default', 'via', LAB_NODE_IP);
    ip('-n', node, 'route', 'add', 'default', 'via', LAB_OUTSIDE_IP);
    // Per-namespace sysctls: the host's own stay as they are.
    execFileSync('ip', ['netns', 'exec', node, 'sysctl', '-qw', 'net.ipv4.ip_forward=1', 'net.bridge.bridge-nf-call-iptables=1']);
  } catch (error) {
    lab.destroy();
    throw error;
  }
  return lab;
}
