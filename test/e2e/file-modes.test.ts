import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type AgentProcess, cleanupAgents, startAgent } from '../helpers/agent.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';
import { listPods } from '../helpers/workloads.js';

/**
 * The file modes docs/security.md ("Files and modes") promises, on what a real server (with its
 * embedded agent), a standalone agent and a pod on each actually leave on disk. Every entry of
 * each data dir must match a rule below, each rule a line of that section: a file the section
 * does not name fails the test too, so the page stays a complete list.
 */

// The test runner's umask is what the children inherit: "the process umask" in the docs.
const UMASK = process.umask();
const UMASK_FILE = 0o666 & ~UMASK;
const UMASK_DIR = 0o777 & ~UMASK;

interface Rule {
  /** Path relative to the data dir, with '/' separators. */
  pattern: RegExp;
  kind: 'dir' | 'file' | 'link';
  /** The mode, or 'skip' for what a pod's own process writes. */
  mode: number | 'skip';
}

const RULES: Rule[] = [
  // "Directories Drover creates (server/, db/, tls/, cred/, agent/, agent/images/, agent/pods/ and each pod's directory and logs/) get mode 0700."
  { pattern: /^(server|server\/(db|tls|cred)|agent|agent\/images|agent\/pods|agent\/pods\/[^/]+|agent\/pods\/[^/]+\/logs(\/[^/]+)?)$/, kind: 'dir', mode: 0o700 },
  // "The spare supervisor's agent/spare-supervisor/ and its own directory in it are 0700; its supervisor.log 0600."
  { pattern: /^agent\/spare-supervisor(\/[^/]+)?$/, kind: 'dir', mode: 0o700 },
  { pattern: /^agent\/spare-supervisor\/[^/]+\/supervisor\.log$/, kind: 'file', mode: 0o600 },
  // "A pod's volumes/, roots/ and subpaths/ and every directory in them are 0700; a volume's files
  // have the mode the volume asks for": every pod gets the kube-api-access volume (defaultMode 420,
  // 0644), its files in a timestamped directory behind the `..data` link.
  { pattern: /^agent\/pods\/[^/]+\/(volumes|roots|subpaths)(\/.*)?$/, kind: 'dir', mode: 0o700 },
  { pattern: /^agent\/pods\/[^/]+\/volumes\/kube-api-access-[^/]+\/\.\.[^/]+\/(token|ca\.crt|namespace)$/, kind: 'file', mode: 0o644 },
  // "Symbolic links (a volume's `..data` and its keys, a process pod's mount points under roots/) have no mode of their own."
  { pattern: /^agent\/pods\/[^/]+\/(volumes|roots)\//, kind: 'link', mode: 'skip' },
  // "A pod's work/ directory gets the process umask" (and what the pod writes there is its own).
  { pattern: /^agent\/pods\/[^/]+\/work$/, kind: 'dir', mode: UMASK_DIR },
  { pattern: /^agent\/pods\/[^/]+\/work\//, kind: 'dir', mode: 'skip' },
  { pattern: /^agent\/pods\/[^/]+\/work\//, kind: 'file', mode: 'skip' },
  // "Private keys, the admin token, the join tokens, the node password, kubeconfigs, agent/fencing.json,
  // and each pod's pod.json, state.json, supervisor.log, supervisor.pid and log files get mode 0600."
  { pattern: /^server\/tls\/[^/]+\.key$/, kind: 'file', mode: 0o600 },
  { pattern: /^server\/cred\/admin\.token$/, kind: 'file', mode: 0o600 },
  { pattern: /^(token|agent-token)$/, kind: 'file', mode: 0o600 },
  { pattern: /^agent\/node-password$/, kind: 'file', mode: 0o600 },
  { pattern: /^kubeconfig\.yaml$/, kind: 'file', mode: 0o600 },
  { pattern: /^agent\/fencing\.json$/, kind: 'file', mode: 0o600 },
  { pattern: /^agent\/pods\/[^/]+\/(pod\.json|state\.json|supervisor\.log|supervisor\.pid)$/, kind: 'file', mode: 0o600 },
  { pattern: /^agent\/pods\/[^/]+\/logs\/[^/]+\/\d+\.log(\.1)?$/, kind: 'file', mode: 0o600 },
  // "The data-dir lock ... (0600)"; a standalone agent's agent.lock the same way.
  { pattern: /^(server|agent)\.lock$/, kind: 'file', mode: 0o600 },
  // "Certificates (agent/node-ca.crt included), server/server-id, agent/node-id, agent/servers.json
  // and agent/shutdown.json are 0644."
  { pattern: /^(server\/tls\/[^/]+\.crt|agent\/node-ca\.crt)$/, kind: 'file', mode: 0o644 },
  { pattern: /^(server\/server-id|agent\/node-id|agent\/servers\.json|agent\/shutdown\.json)$/, kind: 'file', mode: 0o644 },
  // "The SQLite files (state.db, -wal, -shm) are created with the process umask."
  { pattern: /^server\/db\/state\.db(-wal|-shm)?$/, kind: 'file', mode: UMASK_FILE },
];

/**
 * A file being replaced right now (`<file>.<random>.tmp`, renamed over `<file>` in a moment):
 * "created with the final mode from the start", so it is held to its target's rule.
 */
const TEMPORARY = /^(.*)\.[0-9a-f]+\.tmp$/;

interface Finding {
  path: string;
  kind: 'dir' | 'file' | 'link';
  mode: number;
}

/** Every entry under `root` (not `root` itself). Entries that vanish while walking are skipped. */
function walk(root: string, rel = ''): Finding[] {
  const found: Finding[] = [];
  let names: string[];
  try {
    names = fs.readdirSync(path.join(root, rel));
  } catch {
    return found;
  }
  for (const name of names) {
    const relPath = rel ? `${rel}/${name}` : name;
    let stat: fs.Stats;
    try {
      stat = fs.lstatSync(path.join(root, relPath));
    } catch {
      continue; // renamed away (a temporary file) or removed meanwhile
    }
    const kind = stat.isDirectory() ? 'dir' : stat.isSymbolicLink() ? 'link' : 'file';
    found.push({ path: relPath, kind, mode: stat.mode & 0o777 });
    if (kind === 'dir') found.push(...walk(root, relPath));
  }
  return found;
}

const octal = (mode: number): string => `0${mode.toString(8)}`;

/** Entries whose mode differs from their rule, and entries no rule (no line of the docs) covers. */
function violations(root: string): { wrongMode: string[]; undocumented: string[]; entries: Finding[] } {
  const entries = walk(root);
  const wrongMode: string[] = [];
  const undocumented: string[] = [];
  for (const entry of entries) {
    const target = TEMPORARY.exec(entry.path)?.[1] ?? entry.path;
    const rule = RULES.find((r) => r.kind === entry.kind && r.pattern.test(target));
    if (!rule) undocumented.push(`${entry.kind} ${entry.path} (${octal(entry.mode)})`);
    else if (rule.mode !== 'skip' && entry.mode !== rule.mode) wrongMode.push(`${entry.path}: ${octal(entry.mode)}, docs say ${octal(rule.mode)}`);
  }
  return { wrongMode, undocumented, entries };
}

function assertModes(root: string, mustExist: string[]): Finding[] {
  const { wrongMode, undocumented, entries } = violations(root);
  assert.deepEqual(wrongMode, [], `modes that differ from docs/security.md in ${root}`);
  assert.deepEqual(undocumented, [], `entries docs/security.md ("Files and modes") does not name, in ${root}`);
  const present = new Set(entries.map((e) => e.path));
  assert.deepEqual(
    mustExist.filter((p) => !present.has(p)),
    [],
    `expected entries missing from ${root} (the test would check nothing); present: ${[...present].sort().join(', ')}`,
  );
  return entries;
}

function modeOf(file: string): number {
  return fs.statSync(file).mode & 0o777;
}

/** Start a pod bound to `node` whose process writes a line of output, and wait until its log file exists. */
async function runPod(server: ServerProcess, dataDir: string, node: string, name: string): Promise<string> {
  const res = await request(server, 'POST', '/api/v1/namespaces/default/pods', {
    body: {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name },
      spec: {
        nodeName: node,
        terminationGracePeriodSeconds: 2,
        containers: [{ name: 'main', image: 'none', command: ['sh', '-c', 'echo started; exec sleep 3600'], env: [{ name: 'A_SECRET', value: 'hunter2' }] }],
      },
    },
  });
  assert.equal(res.status, 201, res.text);
  const uid = (res.json as { metadata: { uid: string } }).metadata.uid;
  await eventually(async () => (await listPods(server)).some((p) => p.name === name && p.phase === 'Running'), `pod ${name} Running`, 30_000);
  const log = path.join(dataDir, 'agent', 'pods', uid, 'logs', 'main', '0.log');
  await eventually(() => fs.existsSync(log) && fs.readFileSync(log, 'utf8').includes('started'), `${name}'s log file`, 30_000);
  return uid;
}

describe('files and modes, as docs/security.md lists them', () => {
  const root = tempDir('modes');
  // Not there yet: the server creates it, so it must come out 0700.
  const serverDir = path.join(root, 'server-data');
  // Made beforehand with 0750: "a --data-dir that already exists keeps its mode".
  const agentDir = path.join(root, 'agent-data');
  const secondKubeconfig = path.join(root, 'elsewhere', 'admin.kubeconfig');
  let server: ServerProcess;
  let agent: AgentProcess;
  let serverPod: string;
  let agentPod: string;

  before(async () => {
    fs.mkdirSync(agentDir);
    fs.chmodSync(agentDir, 0o750);
    server = await startServer({
      dataDir: serverDir,
      embeddedAgent: true,
      args: ['--node-name', 'modes-server', '--write-kubeconfig', secondKubeconfig],
    });
    agent = await startAgent({ server, name: 'modes-agent', dataDir: agentDir });
    serverPod = await runPod(server, serverDir, 'modes-server', 'on-server');
    agentPod = await runPod(server, agentDir, 'modes-agent', 'on-agent');
    // servers.json is written once the agent has asked for the server list, fencing.json after
    // the first renewal confirmed once its pod manager runs.
    for (const file of ['servers.json', 'fencing.json']) {
      await eventually(() => fs.existsSync(path.join(agentDir, 'agent', file)), `the standalone agent’s ${file}`, 30_000);
    }
  });

  after(async () => {
    await cleanupAgents();
    await cleanup(root);
  });

  it('a server’s data dir, with its embedded agent and a pod: every entry has the mode the docs give it, and the data dir it created is 0700', () => {
    assert.equal(modeOf(serverDir), 0o700, 'the data dir the server created');
    const pod = `agent/pods/${serverPod}`;
    assertModes(serverDir, [
      'agent/images',
      'server.lock',
      'kubeconfig.yaml',
      'token',
      'agent-token',
      'server/server-id',
      'server/cred/admin.token',
      'server/tls/server-ca.crt',
      'server/tls/server-ca.key',
      'server/tls/node-ca.crt',
      'server/tls/node-ca.key',
      'server/tls/client-ca.crt',
      'server/tls/client-ca.key',
      'server/tls/serving.crt',
      'server/tls/serving.key',
      'server/tls/service.key',
      'server/db/state.db',
      'agent/node-id',
      'agent/node-password',
      'agent/node-ca.crt',
      'agent/fencing.json',
      `${pod}/pod.json`,
      `${pod}/state.json`,
      `${pod}/supervisor.log`,
      `${pod}/logs/main/0.log`,
      `${pod}/work`,
    ]);
  });

  it('a standalone agent’s data dir: every entry has the mode the docs give it, and the data dir that already existed keeps its 0750', () => {
    assert.equal(modeOf(agentDir), 0o750, 'Drover does not tighten an existing --data-dir');
    const pod = `agent/pods/${agentPod}`;
    assertModes(agentDir, [
      'agent.lock',
      'agent/node-id',
      'agent/node-password',
      'agent/node-ca.crt',
      'agent/fencing.json',
      'agent/servers.json',
      `${pod}/pod.json`,
      `${pod}/state.json`,
      `${pod}/supervisor.log`,
      `${pod}/logs/main/0.log`,
    ]);
  });

  it('--write-kubeconfig writes a second copy, also 0600, in a directory it creates 0700', () => {
    assert.equal(modeOf(secondKubeconfig), 0o600);
    assert.equal(modeOf(path.dirname(secondKubeconfig)), 0o700);
    assert.equal(fs.readFileSync(secondKubeconfig, 'utf8'), fs.readFileSync(path.join(serverDir, 'kubeconfig.yaml'), 'utf8'));
  });

  it('a planned stop leaves agent/shutdown.json (0644) and no temporary file behind', async () => {
    const exit = await agent.stop('SIGTERM');
    assert.equal(exit.code, 0, `the agent stops cleanly; output:\n${agent.output()}`);
    const entries = assertModes(agentDir, ['agent/shutdown.json', 'agent/node-password', 'agent/fencing.json']);
    assert.deepEqual(
      entries.filter((e) => TEMPORARY.test(e.path)).map((e) => e.path),
      [],
      'every atomic write renamed its temporary file into place',
    );
  });
});
