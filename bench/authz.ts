/**
 * Authorization cost: node-status heartbeats (the strategic merge PATCH of bench/api.ts) per
 * second against one real `drover server`, from four identities in rotating rounds (same server,
 * same script, same clients, so noise hits all):
 *
 *   admin             the admin token, in system:masters: RBAC's fast path, no rule is read
 *   masters-cert      a client certificate in system:masters: the fast path, a certificate's authentication
 *   certificate-user  a client certificate bound by a ClusterRoleBinding: the same authentication,
 *                     then the node authorizer passes it on and RBAC walks every ClusterRoleBinding
 *   serviceaccount    a ServiceAccount token bound the same way: RBAC, and the token's authentication
 *
 * certificate-user / masters-cert is the cost of RBAC alone (both authenticate the same way);
 * the others show what authenticating each way adds.
 *
 *   npm run build && node --import tsx bench/authz.ts [--seconds 10] [--warmup 2] [--rounds 4] [--clients 50] [--nodes 200] [--bindings 60]
 *
 * `--bindings` extra ClusterRoleBindings (to other users, each to its own ClusterRole) are
 * created first, with the ServiceAccount's binding last, so RBAC has a cluster's worth of
 * bindings to walk (a kubeadm cluster starts with about 60). Also measured in-process, without
 * HTTP: one RBAC decision for that request over the same objects.
 *
 * Prints the ratios against the goal (>= 0.9)
 * and writes bench/results/authz.json. The client certificate is issued with openssl from the
 * cluster's client CA, as an administrator could.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { RbacAuthorizer } from '../src/apiserver/rbac/authorizer.js';
import { InMemoryRbacSource } from '../src/apiserver/rbac/source.js';
import type { ClusterRole, ClusterRoleBinding, UserInfo } from '../src/apiserver/rbac/types.js';
import {
  BenchApi,
  benchTempDir,
  checkBuild,
  createNodes,
  fmtInt,
  heartbeatLoad,
  installCleanup,
  machineInfo,
  median,
  parseBenchArgs,
  type PatchTarget,
  percentile,
  printMachine,
  processCpuSeconds,
  removeBenchTempDir,
  round,
  startBenchServer,
  stopChild,
  writeResult,
} from './common.js';

const { n } = parseBenchArgs({ seconds: 10, warmup: 2, rounds: { default: 4, min: 1 }, clients: 50, nodes: 200, bindings: 60 });
const { seconds: SECONDS, warmup: WARMUP_SECONDS, rounds: ROUNDS, clients: CLIENTS, nodes: NODES, bindings: BINDINGS } = n;
const GOAL_RATIO = 0.9;

const RBAC = 'rbac.authorization.k8s.io';
const NAMESPACE = 'bench-authz';
const SA = 'heartbeats';
const SA_USER: UserInfo = {
  name: `system:serviceaccount:${NAMESPACE}:${SA}`,
  groups: ['system:serviceaccounts', `system:serviceaccounts:${NAMESPACE}`, 'system:authenticated'],
};

/** What the ServiceAccount may do: write node status, as a kubelet's would. */
const STATUS_WRITER: ClusterRole = {
  apiVersion: `${RBAC}/v1`,
  kind: 'ClusterRole',
  metadata: { name: 'bench-node-status-writer' },
  rules: [
    { verbs: ['get', 'patch', 'update'], apiGroups: [''], resources: ['nodes/status'] },
    { verbs: ['get', 'list', 'watch'], apiGroups: [''], resources: ['nodes'] },
  ],
};

function otherRole(i: number): ClusterRole {
  return {
    apiVersion: `${RBAC}/v1`,
    kind: 'ClusterRole',
    metadata: { name: `bench-other-${i}` },
    rules: [{ verbs: ['get', 'list'], apiGroups: ['apps'], resources: ['deployments'] }],
  };
}

function binding(name: string, role: string, subject: ClusterRoleBinding['subjects']): ClusterRoleBinding {
  return { apiVersion: `${RBAC}/v1`, kind: 'ClusterRoleBinding', metadata: { name }, roleRef: { apiGroup: RBAC, kind: 'ClusterRole', name: role }, subjects: subject ?? [] };
}

function otherBinding(i: number): ClusterRoleBinding {
  return binding(`bench-other-${i}`, `bench-other-${i}`, [{ kind: 'User', apiGroup: RBAC, name: `user-${i}` }, { kind: 'Group', apiGroup: RBAC, name: `team-${i}` }]);
}

const CERT_USER = 'bench-heartbeat-user';
const CERT_BINDING = binding('bench-cert-user', 'bench-node-status-writer', [{ kind: 'User', apiGroup: RBAC, name: CERT_USER }]);

/** A client certificate (CN=user, O=group) from the cluster's client CA, with openssl. */
function issueClientCertificate(dataDir: string, user: string, group: string, serial: number): { cert: string; key: string } {
  const tls = path.join(dataDir, 'server/tls');
  const dir = fs.mkdtempSync(path.join(dataDir, 'cert-'));
  fs.writeFileSync(path.join(dir, 'ext'), 'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n');
  const openssl = (args: string[]): void => {
    const run = spawnSync('openssl', args, { cwd: dir, encoding: 'utf8' });
    if (run.status !== 0) throw new Error(`openssl ${args[0]}: ${run.stderr}`);
  };
  openssl(['req', '-new', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', 'key.pem', '-subj', `/CN=${user}/O=${group}`, '-out', 'req.csr']);
  openssl(['x509', '-req', '-in', 'req.csr', '-CA', path.join(tls, 'client-ca.crt'), '-CAkey', path.join(tls, 'client-ca.key'), '-set_serial', String(serial), '-days', '1', '-extfile', 'ext', '-out', 'cert.pem']);
  return { cert: fs.readFileSync(path.join(dir, 'cert.pem'), 'utf8'), key: fs.readFileSync(path.join(dir, 'key.pem'), 'utf8') };
}

const SA_BINDING = binding('bench-heartbeats', STATUS_WRITER.metadata.name!, [{ kind: 'ServiceAccount', name: SA, namespace: NAMESPACE }]);

interface Measured {
  target: string;
  seconds: number;
  requests: number;
  perSecond: number;
  errors: number;
  firstError?: string;
  latencyMs: { p50: number; p99: number };
  serverCpuMicrosPerRequest: number;
}

/** One RBAC decision for the ServiceAccount's PATCH over the same objects, in microseconds (no HTTP, no authentication). */
function decisionMicros(defaultRoles: ClusterRole[], defaultBindings: ClusterRoleBinding[]): { micros: number; allowed: boolean } {
  const source = new InMemoryRbacSource({
    clusterRoles: [...defaultRoles, ...Array.from({ length: BINDINGS }, (_, i) => otherRole(i)), STATUS_WRITER],
    clusterRoleBindings: [...defaultBindings, ...Array.from({ length: BINDINGS }, (_, i) => otherBinding(i)), SA_BINDING],
  });
  const authorizer = new RbacAuthorizer(source);
  const attributes = { verb: 'patch', group: '', resource: 'nodes', subresource: 'status', name: 'bench-node-0001' };
  let allowed = false;
  for (let i = 0; i < 20_000; i++) allowed = authorizer.authorize(SA_USER, attributes).allowed;
  const n = 200_000;
  const t0 = performance.now();
  for (let i = 0; i < n; i++) authorizer.authorize(SA_USER, attributes);
  return { micros: ((performance.now() - t0) * 1000) / n, allowed };
}

async function main(): Promise<void> {
  checkBuild();
  installCleanup();
  const machine = machineInfo();
  printMachine(machine);
  const dataDir = benchTempDir('drover-bench-authz-');
  const server = await startBenchServer(dataDir, path.join(dataDir, 'server.log'));
  const api = new BenchApi(server, 8);
  const agent = new https.Agent({ keepAlive: true, maxSockets: CLIENTS });
  try {
    const port = Number(new URL(server.url).port);
    const admin: PatchTarget = { port, ca: server.caPem, token: server.adminToken, agent };
    await createNodes(admin, NODES, CLIENTS, 'drover');

    // The policy: other users' bindings first, the ServiceAccount's last.
    await api.json('POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NAMESPACE } });
    await api.json('POST', `/api/v1/namespaces/${NAMESPACE}/serviceaccounts`, { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: SA } });
    for (let i = 0; i < BINDINGS; i++) {
      await api.json('POST', `/apis/${RBAC}/v1/clusterroles`, otherRole(i));
      await api.json('POST', `/apis/${RBAC}/v1/clusterrolebindings`, otherBinding(i));
    }
    await api.json('POST', `/apis/${RBAC}/v1/clusterroles`, STATUS_WRITER);
    await api.json('POST', `/apis/${RBAC}/v1/clusterrolebindings`, CERT_BINDING);
    await api.json('POST', `/apis/${RBAC}/v1/clusterrolebindings`, SA_BINDING);
    const tokenRequest = await api.json<{ status: { token: string } }>('POST', `/api/v1/namespaces/${NAMESPACE}/serviceaccounts/${SA}/token`, {
      apiVersion: 'authentication.k8s.io/v1',
      kind: 'TokenRequest',
      spec: { expirationSeconds: 3600 },
    });
    const serviceAccount: PatchTarget = { port, ca: server.caPem, token: tokenRequest.status.token, agent };
    const certificateUser: PatchTarget = { port, ca: server.caPem, token: '', agent, ...issueClientCertificate(dataDir, CERT_USER, 'bench', 77) };
    const mastersCertificate: PatchTarget = { port, ca: server.caPem, token: '', agent, ...issueClientCertificate(dataDir, 'bench-admin', 'system:masters', 78) };
    // The bindings reach the server's RBAC cache through its watch: wait for the first 200s.
    let probe = 1_000_000;
    for (const [who, target] of [['masters certificate', mastersCertificate], ['certificate user', certificateUser], ['ServiceAccount', serviceAccount]] as const) {
      for (let attempt = 0; ; attempt++) {
        const run = await heartbeatLoad(target, new Uint32Array(1).fill(probe++), 1, 1);
        if (run.errors === 0 && run.latencies.length > 0) break;
        if (attempt > 200) throw new Error(`the ${who} is never allowed: ${run.firstError}`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
    const defaults = {
      roles: (await api.json<{ items: ClusterRole[] }>('GET', `/apis/${RBAC}/v1/clusterroles`)).items.filter((r) => !r.metadata.name!.startsWith('bench-')),
      bindings: (await api.json<{ items: ClusterRoleBinding[] }>('GET', `/apis/${RBAC}/v1/clusterrolebindings`)).items.filter((b) => !b.metadata.name!.startsWith('bench-')),
    };
    console.log(
      `# ${NODES} nodes; ${defaults.bindings.length} default + ${BINDINGS} other ClusterRoleBindings before the certificate user's and the ServiceAccount's; ` +
        `${CLIENTS} clients, keep-alive, ${ROUNDS} x ${round(SECONDS / ROUNDS, 1)} s measured per identity after ${WARMUP_SECONDS} s warm-up each`,
    );

    const beats = new Uint32Array(NODES);
    const targets: Array<[string, PatchTarget]> = [
      ['admin', admin],
      ['masters-cert', mastersCertificate],
      ['certificate-user', certificateUser],
      ['serviceaccount', serviceAccount],
    ];
    const samples = new Map<string, { seconds: number; latencies: number[]; errors: number; cpu: number; firstError?: string }>();
    /** Per identity, each round's server CPU per request (µs) and rate: ratios of one round are of neighbouring slots. */
    const perRound = new Map<string, { cpuUs: number; perSecond: number }[]>();
    const run = async (name: string, target: PatchTarget, ms: number, keep: boolean): Promise<void> => {
      const cpu0 = processCpuSeconds(server.child.pid!);
      const result = await heartbeatLoad(target, beats, CLIENTS, ms);
      const cpu = processCpuSeconds(server.child.pid!) - cpu0;
      if (!keep) return;
      const rounds = perRound.get(name) ?? [];
      rounds.push({ cpuUs: (cpu / Math.max(1, result.latencies.length)) * 1e6, perSecond: result.latencies.length / result.seconds });
      perRound.set(name, rounds);
      const pooled = samples.get(name) ?? { seconds: 0, latencies: [], errors: 0, cpu: 0 };
      pooled.seconds += result.seconds;
      for (const l of result.latencies) pooled.latencies.push(l);
      pooled.errors += result.errors;
      pooled.cpu += cpu;
      pooled.firstError ??= result.firstError;
      samples.set(name, pooled);
    };
    for (const [name, target] of targets) await run(name, target, WARMUP_SECONDS * 1000, false);
    for (let r = 0; r < ROUNDS; r++) {
      // Rotate which goes first, so none always follows the same other's garbage.
      const order = [...targets.slice(r % targets.length), ...targets.slice(0, r % targets.length)];
      for (const [name, target] of order) await run(name, target, (SECONDS / ROUNDS) * 1000, true);
    }

    const measured: Measured[] = targets.map(([name]) => {
      const s = samples.get(name)!;
      const sorted = Float64Array.from(s.latencies).sort();
      return {
        target: name,
        seconds: round(s.seconds, 2),
        requests: s.latencies.length,
        perSecond: round(s.latencies.length / s.seconds, 0),
        errors: s.errors,
        ...(s.firstError ? { firstError: s.firstError } : {}),
        latencyMs: { p50: round(percentile(sorted, 50), 2), p99: round(percentile(sorted, 99), 2) },
        serverCpuMicrosPerRequest: round((s.cpu / s.latencies.length) * 1e6, 0),
      };
    });
    for (const m of measured) {
      console.log(
        `${m.target.padEnd(15)} ${fmtInt(m.perSecond).padStart(6)} PATCH/s  p50 ${m.latencyMs.p50.toFixed(1).padStart(5)} ms  ` +
          `p99 ${m.latencyMs.p99.toFixed(1).padStart(5)} ms  server CPU ${m.serverCpuMicrosPerRequest} us/req${m.errors ? `  ERRORS ${m.errors}: ${m.firstError}` : ''}`,
      );
    }
    const [adminResult, mastersResult, certResult, saResult] = measured as [Measured, Measured, Measured, Measured];
    const rbacRatio = round(certResult.perSecond / mastersResult.perSecond, 3);
    const certRatio = round(certResult.perSecond / adminResult.perSecond, 3);
    const ratio = round(saResult.perSecond / adminResult.perSecond, 3);
    const decision = decisionMicros(defaults.roles, defaults.bindings);
    const verdict = (r: number): string => `goal >= ${GOAL_RATIO}: ${r >= GOAL_RATIO ? 'met' : 'NOT met'}`;
    // Server CPU per request moves far less with the machine's load than throughput does.
    const rbacCpuRatio = round(mastersResult.serverCpuMicrosPerRequest / certResult.serverCpuMicrosPerRequest, 3);
    const certCpuRatio = round(adminResult.serverCpuMicrosPerRequest / certResult.serverCpuMicrosPerRequest, 3);
    const cpuRatio = round(adminResult.serverCpuMicrosPerRequest / saResult.serverCpuMicrosPerRequest, 3);
    console.log(`ratio certificate-user/masters-cert (RBAC alone): ${rbacRatio} (${verdict(rbacRatio)}); by server CPU per request: ${rbacCpuRatio}`);
    console.log(`ratio certificate-user/admin (RBAC and a certificate's authentication): ${certRatio} (${verdict(certRatio)}); by server CPU per request: ${certCpuRatio}`);
    console.log(`ratio serviceaccount/admin (RBAC and a token's authentication): ${ratio} (${verdict(ratio)}); by server CPU per request: ${cpuRatio}`);
    // The median over rounds of each round's ratio: a burst of other jobs' load moves one round, not the figure.
    const roundRatios = (over: string, under: string, by: 'cpuUs' | 'perSecond'): number[] =>
      perRound.get(over)!.map((r, i) => (by === 'cpuUs' ? perRound.get(under)![i]!.cpuUs / r.cpuUs : r.perSecond / perRound.get(under)![i]!.perSecond));
    const medianRatios = Object.fromEntries(
      (
        [
          ['rbacAlone', 'certificate-user', 'masters-cert'],
          ['certificateUserOverAdmin', 'certificate-user', 'admin'],
          ['serviceAccountOverAdmin', 'serviceaccount', 'admin'],
        ] as const
      ).map(([label, over, under]) => [label, { byServerCpu: round(median(roundRatios(over, under, 'cpuUs')), 3), byRate: round(median(roundRatios(over, under, 'perSecond')), 3) }]),
    );
    for (const [label, r] of Object.entries(medianRatios)) console.log(`median of ${ROUNDS} rounds' ratios, ${label}: by server CPU per request ${r.byServerCpu}, by rate ${r.byRate}`);
    console.log(
      `one RBAC decision in-process for the ServiceAccount's PATCH (${defaults.bindings.length + BINDINGS + 1} ClusterRoleBindings): ${decision.micros.toFixed(2)} us (allowed: ${decision.allowed})`,
    );
    const file = writeResult('authz', {
      machine,
      settings: { seconds: SECONDS, warmupSeconds: WARMUP_SECONDS, rounds: ROUNDS, clients: CLIENTS, nodes: NODES, extraBindings: BINDINGS, defaultBindings: defaults.bindings.length },
      results: measured,
      ratio: {
        rbacAlone: rbacRatio,
        rbacAloneByServerCpu: rbacCpuRatio,
        certificateUserOverAdmin: certRatio,
        certificateUserOverAdminByServerCpu: certCpuRatio,
        serviceAccountOverAdmin: ratio,
        serviceAccountOverAdminByServerCpu: cpuRatio,
        goal: GOAL_RATIO,
        met: { rbacAlone: rbacRatio >= GOAL_RATIO, certificateUser: certRatio >= GOAL_RATIO, serviceAccount: ratio >= GOAL_RATIO },
      },
      medianOfRounds: medianRatios,
      rounds: Object.fromEntries([...perRound].map(([name, rounds]) => [name, rounds.map((r) => ({ cpuUs: round(r.cpuUs, 0), perSecond: round(r.perSecond, 0) }))])),
      rbacDecisionMicros: round(decision.micros, 3),
    });
    console.log(`# wrote ${file}`);
  } finally {
    api.destroy();
    agent.destroy();
    await stopChild(server.child, 'SIGTERM', 10_000);
    removeBenchTempDir(dataDir);
  }
}

await main();
