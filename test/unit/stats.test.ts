import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { cgroupUsage, keyedValue, nodeUsage, processGroupUsage, type Sample, summarize } from '../../src/agent/stats.js';

/**
 * The agent's usage figures for metrics.k8s.io: cgroup v1 and v2 files as the kernel writes them
 * (in a made-up cgroup root), /proc for process-runtime containers, and the CPU rate over two
 * samples (pure).
 */

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'drover-stats-'));
after(() => fs.rmSync(dir, { recursive: true, force: true }));

function write(root: string, files: Record<string, string>): string {
  for (const [file, text] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(root, file)), { recursive: true });
    fs.writeFileSync(path.join(root, file), text);
  }
  return root;
}

describe('usage from cgroups', () => {
  it('cgroup v1: cpuacct.usage, and memory.usage_in_bytes less total_inactive_file', () => {
    const root = write(path.join(dir, 'v1'), {
      'cpuacct/drover/uid-1/web/cpuacct.usage': '2500000000\n',
      'memory/drover/uid-1/web/memory.usage_in_bytes': '10485760\n',
      'memory/drover/uid-1/web/memory.stat': 'cache 100\ninactive_file 4096\ntotal_inactive_file 2097152\n',
      'cpuacct/cpuacct.usage': '900000000000\n',
      'memory/memory.usage_in_bytes': '4294967296\n',
      'memory/memory.stat': 'inactive_file 0\ntotal_inactive_file 1073741824\n',
    });
    assert.deepEqual(cgroupUsage('/drover/uid-1/web', root), { cpuNs: 2.5e9, memoryBytes: 10485760 - 2097152 });
    assert.deepEqual(nodeUsage(root), { cpuNs: 9e11, memoryBytes: 3 * 2 ** 30 });
    assert.equal(cgroupUsage('/drover/uid-1/gone', root), undefined);
  });

  it('cgroup v1 with cpu and cpuacct joined', () => {
    const root = write(path.join(dir, 'joined'), {
      'cpu,cpuacct/drover/p/c/cpuacct.usage': '7\n',
      'memory/drover/p/c/memory.usage_in_bytes': '100\n',
      'memory/drover/p/c/memory.stat': 'inactive_file 40\n',
    });
    assert.deepEqual(cgroupUsage('drover/p/c', root), { cpuNs: 7, memoryBytes: 60 });
  });

  it('cgroup v2: cpu.stat usage_usec, memory.current less inactive_file; the node from /proc', () => {
    const root = write(path.join(dir, 'v2'), {
      'cgroup.controllers': 'cpu memory pids\n',
      'drover/uid-2/app/cpu.stat': 'usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n',
      'drover/uid-2/app/memory.current': '8388608\n',
      'drover/uid-2/app/memory.stat': 'anon 4194304\nfile 4194304\ninactive_file 1048576\n',
    });
    const proc = write(path.join(dir, 'proc-v2'), {
      stat: 'cpu  100 20 30 1000 50 5 5 10 0 0\ncpu0 1 2 3\n',
      meminfo: 'MemTotal:       1000 kB\nMemFree:         200 kB\nMemAvailable:    600 kB\nInactive(file):  100 kB\n',
    });
    assert.deepEqual(cgroupUsage('/drover/uid-2/app', root), { cpuNs: 1.5e9, memoryBytes: 8388608 - 1048576 });
    // busy = user + nice + system + irq + softirq + steal = 170 ticks of 10 ms; used = 800 kB, less 100 kB inactive file.
    assert.deepEqual(nodeUsage(root, proc), { cpuNs: 1.7e9, memoryBytes: 700 * 1024 });
  });

  it('keyed files: memory.stat pairs and /proc/meminfo with its colon', () => {
    assert.equal(keyedValue('a 1\nb 2\n', 'b'), 2);
    assert.equal(keyedValue('MemTotal:  24 kB\n', 'MemTotal'), 24);
    assert.equal(keyedValue('a 1\n', 'missing'), undefined);
    assert.equal(keyedValue(undefined, 'a'), undefined);
  });
});

describe('usage of a process group', () => {
  it('sums utime+stime and resident pages of the processes in the group, whatever their command', () => {
    // Fields after the command: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime …
    const stat = (pid: number, pgrp: number, command: string, utime: number, stime: number): string =>
      `${pid} (${command}) S 1 ${pgrp} ${pgrp} 0 -1 0 0 0 0 0 ${utime} ${stime} 0 0 20 0 1 0 0 0 0\n`;
    const proc = write(path.join(dir, 'proc'), {
      '100/stat': stat(100, 100, 'sh', 150, 50),
      '100/statm': '1000 25 10 1 0 50 0\n',
      '101/stat': stat(101, 100, 'a (weird) name', 30, 20),
      '101/statm': '1000 5 10 1 0 50 0\n',
      '200/stat': stat(200, 200, 'other', 999, 999),
      '200/statm': '1000 999 10 1 0 50 0\n',
      'self/stat': 'not a pid dir',
    });
    assert.deepEqual(processGroupUsage(100, proc), { cpuNs: 2.5e9, memoryBytes: 30 * 4096 });
    assert.equal(processGroupUsage(300, proc), undefined);
  });
});

describe('CPU rates over a window', () => {
  const sample = (at: number, nodeCpuNs: number, containers: { name: string; cpuNs: number; startedAt?: string }[]): Sample => ({
    at,
    time: `2026-01-01T00:00:0${Math.round(at / 1000)}Z`,
    node: { cpuNs: nodeCpuNs, memoryBytes: 1000 },
    pods: [
      {
        uid: 'u1',
        namespace: 'default',
        name: 'web',
        containers: containers.map((c) => ({ name: c.name, cpuNs: c.cpuNs, memoryBytes: 2048, startedAt: c.startedAt ?? 's1' })),
      },
    ],
  });

  it('is the CPU time used between two samples over the time between them', () => {
    const summary = summarize('n1', sample(1000, 1e9, [{ name: 'a', cpuNs: 5e8 }]), sample(3000, 4e9, [{ name: 'a', cpuNs: 1.5e9 }]));
    assert.equal(summary.windowSeconds, 2);
    assert.deepEqual(summary.node.cpu, { time: '2026-01-01T00:00:03Z', usageNanoCores: 1.5e9, usageCoreNanoSeconds: 4e9 });
    assert.deepEqual(summary.node.memory, { time: '2026-01-01T00:00:03Z', workingSetBytes: 1000 });
    assert.equal(summary.pods[0]!.containers[0]!.cpu.usageNanoCores, 5e8);
    assert.deepEqual(summary.pods[0]!.podRef, { name: 'web', namespace: 'default', uid: 'u1' });
  });

  it('leaves out a container with no earlier sample of the same instance, and never reports a negative rate', () => {
    const before = sample(0, 1e9, [{ name: 'a', cpuNs: 9e9 }, { name: 'b', cpuNs: 1e9, startedAt: 'old' }]);
    const after = sample(1000, 2e9, [{ name: 'a', cpuNs: 1e9 }, { name: 'b', cpuNs: 2e9, startedAt: 'new' }, { name: 'c', cpuNs: 1 }]);
    const summary = summarize('n1', before, after);
    assert.deepEqual(summary.pods[0]!.containers.map((c) => [c.name, c.cpu.usageNanoCores]), [['a', 0]]);
  });
});
