import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, it } from 'node:test';
import type { KubeObject } from '../../src/apiserver/objects.js';
import type { HttpClient } from '../../src/client/http.js';
import { DEPLOYMENTS, NODES, PODS } from '../../src/client/types.js';
import { PODDISRUPTIONBUDGETS } from '../../src/controllers/disruption.js';
import {
  computeBudgetStatus,
  type ControllerScale,
  DISRUPTED_POD_TIMEOUT_MS,
  type DisruptionBudgetSpec,
} from '../../src/controllers/disruption-logic.js';
import { type FakeKubelet, type HandMadeCluster, isRunningAndReady, startHandMadeCluster } from '../helpers/fake-kubelet.js';
import { kubectlClients, runKubectl } from '../helpers/kubectl.js';
import { eventually, request, type ServerProcess, tempDir } from '../helpers/server.js';

// ---------------------------------------------------------------------------------------------
// The status maths, as pure tables

const NOW = Date.parse('2025-01-01T00:00:00Z');

function pod(name: string, healthy: boolean, owner?: string): KubeObject {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name,
      namespace: 'default',
      labels: { app: 'web' },
      ...(owner ? { ownerReferences: [{ apiVersion: 'apps/v1', kind: 'ReplicaSet', name: owner, uid: `uid-${owner}`, controller: true }] } : {}),
    },
    status: healthy
      ? { phase: 'Running', conditions: [{ type: 'Ready', status: 'True' }] }
      : { phase: 'Running', conditions: [{ type: 'Ready', status: 'False' }] },
  };
}

function pods(healthy: number, unhealthy: number, owner?: string): KubeObject[] {
  return [
    ...Array.from({ length: healthy }, (_, i) => pod(`h${i}`, true, owner)),
    ...Array.from({ length: unhealthy }, (_, i) => pod(`u${i}`, false, owner)),
  ];
}

/** Every owned pod's controller has `replicas`. */
const scaleOf =
  (replicas: number) =>
  (p: KubeObject): ControllerScale | undefined => {
    const owner = p.metadata.ownerReferences?.[0];
    return owner ? { uid: owner.uid, replicas } : undefined;
  };

describe('PodDisruptionBudget status maths', () => {
  const cases: {
    what: string;
    spec: DisruptionBudgetSpec;
    pods: KubeObject[];
    replicas?: number;
    want: { expectedPods: number; currentHealthy: number; desiredHealthy: number; disruptionsAllowed: number };
  }[] = [
    { what: 'minAvailable int, all healthy', spec: { minAvailable: 2 }, pods: pods(3, 0, 'rs'), replicas: 3, want: { expectedPods: 3, currentHealthy: 3, desiredHealthy: 2, disruptionsAllowed: 1 } },
    { what: 'minAvailable int counts the pods, not the scale', spec: { minAvailable: 2 }, pods: pods(2, 0, 'rs'), replicas: 5, want: { expectedPods: 2, currentHealthy: 2, desiredHealthy: 2, disruptionsAllowed: 0 } },
    { what: 'minAvailable int, one unready', spec: { minAvailable: 2 }, pods: pods(2, 1, 'rs'), replicas: 3, want: { expectedPods: 3, currentHealthy: 2, desiredHealthy: 2, disruptionsAllowed: 0 } },
    { what: 'minAvailable int above the healthy count never goes negative', spec: { minAvailable: 5 }, pods: pods(3, 0, 'rs'), replicas: 3, want: { expectedPods: 3, currentHealthy: 3, desiredHealthy: 5, disruptionsAllowed: 0 } },
    { what: 'minAvailable % of the controller scale rounds up', spec: { minAvailable: '50%' }, pods: pods(3, 0, 'rs'), replicas: 3, want: { expectedPods: 3, currentHealthy: 3, desiredHealthy: 2, disruptionsAllowed: 1 } },
    { what: 'minAvailable % uses the scale even with fewer pods', spec: { minAvailable: '50%' }, pods: pods(3, 0, 'rs'), replicas: 5, want: { expectedPods: 5, currentHealthy: 3, desiredHealthy: 3, disruptionsAllowed: 0 } },
    { what: 'minAvailable 100%', spec: { minAvailable: '100%' }, pods: pods(4, 0, 'rs'), replicas: 4, want: { expectedPods: 4, currentHealthy: 4, desiredHealthy: 4, disruptionsAllowed: 0 } },
    { what: 'maxUnavailable int', spec: { maxUnavailable: 1 }, pods: pods(3, 0, 'rs'), replicas: 3, want: { expectedPods: 3, currentHealthy: 3, desiredHealthy: 2, disruptionsAllowed: 1 } },
    { what: 'maxUnavailable int larger than the scale', spec: { maxUnavailable: 10 }, pods: pods(3, 0, 'rs'), replicas: 3, want: { expectedPods: 3, currentHealthy: 3, desiredHealthy: 0, disruptionsAllowed: 3 } },
    { what: 'maxUnavailable % rounds up (so fewer must stay)', spec: { maxUnavailable: '30%' }, pods: pods(3, 0, 'rs'), replicas: 3, want: { expectedPods: 3, currentHealthy: 3, desiredHealthy: 2, disruptionsAllowed: 1 } },
    { what: 'maxUnavailable % with an unready pod', spec: { maxUnavailable: '25%' }, pods: pods(3, 1, 'rs'), replicas: 4, want: { expectedPods: 4, currentHealthy: 3, desiredHealthy: 3, disruptionsAllowed: 0 } },
    { what: 'maxUnavailable 0', spec: { maxUnavailable: 0 }, pods: pods(3, 0, 'rs'), replicas: 3, want: { expectedPods: 3, currentHealthy: 3, desiredHealthy: 3, disruptionsAllowed: 0 } },
    { what: 'bare pods count as themselves', spec: { maxUnavailable: '50%' }, pods: pods(4, 0), want: { expectedPods: 4, currentHealthy: 4, desiredHealthy: 2, disruptionsAllowed: 2 } },
    { what: 'zero pods, minAvailable int', spec: { minAvailable: 1 }, pods: [], want: { expectedPods: 0, currentHealthy: 0, desiredHealthy: 1, disruptionsAllowed: 0 } },
    { what: 'zero pods, minAvailable 0 still allows nothing', spec: { minAvailable: 0 }, pods: [], want: { expectedPods: 0, currentHealthy: 0, desiredHealthy: 0, disruptionsAllowed: 0 } },
    { what: 'zero pods, maxUnavailable %', spec: { maxUnavailable: '50%' }, pods: [], want: { expectedPods: 0, currentHealthy: 0, desiredHealthy: 0, disruptionsAllowed: 0 } },
    { what: 'neither field allows nothing', spec: {}, pods: pods(3, 0, 'rs'), replicas: 3, want: { expectedPods: 0, currentHealthy: 3, desiredHealthy: 0, disruptionsAllowed: 0 } },
  ];
  for (const c of cases) {
    it(c.what, () => {
      const { status } = computeBudgetStatus({ generation: 4, spec: c.spec, pods: c.pods, controllerScale: scaleOf(c.replicas ?? 0), now: NOW });
      const { expectedPods, currentHealthy, desiredHealthy, disruptionsAllowed } = status;
      assert.deepEqual({ expectedPods, currentHealthy, desiredHealthy, disruptionsAllowed }, c.want);
      assert.equal(status.observedGeneration, 4);
      const condition = status.conditions.find((x) => x.type === 'DisruptionAllowed')!;
      assert.equal(condition.status, c.want.disruptionsAllowed > 0 ? 'True' : 'False');
      assert.equal(condition.reason, c.want.disruptionsAllowed > 0 ? 'SufficientPods' : 'InsufficientPods');
    });
  }

  it('a controller is counted once however many of its pods match', () => {
    const { status } = computeBudgetStatus({ generation: 1, spec: { minAvailable: '100%' }, pods: pods(2, 0, 'rs'), controllerScale: scaleOf(3), now: NOW });
    assert.equal(status.expectedPods, 3);
  });

  it('a pod an eviction just passed is not healthy until it expires; its entry goes when the pod does', () => {
    const previous = { disruptedPods: { h0: new Date(NOW - 1000).toISOString(), gone: new Date(NOW).toISOString() } };
    const fresh = computeBudgetStatus({ generation: 1, spec: { minAvailable: 2 }, pods: pods(3, 0, 'rs'), controllerScale: scaleOf(3), previous, now: NOW });
    assert.equal(fresh.status.currentHealthy, 2);
    assert.equal(fresh.status.disruptionsAllowed, 0);
    assert.deepEqual(Object.keys(fresh.status.disruptedPods ?? {}), ['h0']);
    assert.equal(fresh.recheckAt, NOW - 1000 + DISRUPTED_POD_TIMEOUT_MS);
    const expired = computeBudgetStatus({ generation: 1, spec: { minAvailable: 2 }, pods: pods(3, 0, 'rs'), controllerScale: scaleOf(3), previous, now: NOW + DISRUPTED_POD_TIMEOUT_MS });
    assert.equal(expired.status.currentHealthy, 3);
    assert.equal(expired.status.disruptedPods, undefined);
  });

  it('the condition keeps its transition time while its status holds, and a bad value fails safe', () => {
    const first = computeBudgetStatus({ generation: 1, spec: { minAvailable: 1 }, pods: pods(3, 0, 'rs'), controllerScale: scaleOf(3), now: NOW }).status;
    const later = computeBudgetStatus({ generation: 1, spec: { minAvailable: 2 }, pods: pods(3, 0, 'rs'), controllerScale: scaleOf(3), previous: first, now: NOW + 60_000 }).status;
    assert.equal(later.conditions[0]!.lastTransitionTime, first.conditions[0]!.lastTransitionTime);
    const bad = computeBudgetStatus({ generation: 2, spec: { maxUnavailable: 'lots' }, pods: pods(3, 0, 'rs'), controllerScale: scaleOf(3), previous: first, now: NOW + 60_000 }).status;
    assert.equal(bad.disruptionsAllowed, 0);
    assert.equal(bad.conditions[0]!.reason, 'SyncFailed');
    assert.match(bad.conditions[0]!.message ?? '', /lots/);
    assert.notEqual(bad.conditions[0]!.lastTransitionTime, first.conditions[0]!.lastTransitionTime);
  });
});

// ---------------------------------------------------------------------------------------------
// Evictions against a real server, with hand-made nodes and a fake kubelet

const NODE_NAMES = ['n1', 'n2', 'n3'];
const NS = 'default';
const VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget.";

function nodeOf(p: KubeObject): string | undefined {
  return (p.spec as { nodeName?: string } | undefined)?.nodeName;
}

describe('evictions honour PodDisruptionBudgets (server process, hand-made nodes, a fake kubelet)', () => {
  let server: ServerProcess;
  let client: HttpClient;
  let kubelet: FakeKubelet;
  let cluster: HandMadeCluster | undefined;
  let cacheDir: string;

  const activeWebPods = async (): Promise<KubeObject[]> =>
    (await client.list(PODS, NS)).items.filter((p) => p.metadata.name!.startsWith('web-') && !p.metadata.deletionTimestamp);
  const budget = async (name = 'web-pdb'): Promise<Record<string, unknown>> =>
    ((await client.get(PODDISRUPTIONBUDGETS, NS, name))!.status ?? {}) as Record<string, unknown>;
  /** Ready web pods, once the budget has counted them and allows exactly `allowed`. */
  const settled = (replicas: number, allowed: number): Promise<KubeObject[]> =>
    eventually(async () => {
      const list = await activeWebPods();
      const status = await budget();
      return (
        list.length === replicas &&
        list.every(isRunningAndReady) &&
        status.currentHealthy === replicas &&
        status.disruptionsAllowed === allowed &&
        list
      );
    }, `${replicas} ready web pods and a budget allowing ${allowed}`, 30_000);
  const evict = (name: string, query = ''): Promise<{ status: number; json: unknown }> =>
    request(server, 'POST', `/api/v1/namespaces/${NS}/pods/${name}/eviction${query}`, {
      body: { apiVersion: 'policy/v1', kind: 'Eviction', metadata: { name, namespace: NS } },
    });

  before(async () => {
    cluster = await startHandMadeCluster({ nodeNames: NODE_NAMES, namespace: NS, logName: 'disruption' });
    ({ server, client, kubelet } = cluster);
    cacheDir = tempDir('disruption-kubectl');
  });

  after(async () => {
    await cluster?.stop(cacheDir ?? '');
  });

  it('a budget of minAvailable 2 over 3 replicas allows 1: kubectl get pdb shows it', async () => {
    await client.create(DEPLOYMENTS, NS, {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'web' },
      spec: {
        replicas: 3,
        selector: { matchLabels: { app: 'web' } },
        template: { metadata: { labels: { app: 'web' } }, spec: { containers: [{ name: 'main', image: 'busybox', command: ['sleep', '3600'] }] } },
      },
    });
    await client.create(PODDISRUPTIONBUDGETS, NS, {
      apiVersion: 'policy/v1',
      kind: 'PodDisruptionBudget',
      metadata: { name: 'web-pdb' },
      spec: { minAvailable: 2, selector: { matchLabels: { app: 'web' } } },
    });
    await settled(3, 1);
    const status = await budget();
    assert.equal(status.observedGeneration, 1);
    assert.equal(status.expectedPods, 3);
    assert.equal(status.desiredHealthy, 2);
    assert.deepEqual(
      (status.conditions as { type: string; status: string; reason: string }[]).map((c) => `${c.type}=${c.status}:${c.reason}`),
      ['DisruptionAllowed=True:SufficientPods'],
    );
    const [kubectl] = kubectlClients();
    const result = await runKubectl(kubectl!, server.kubeconfig, cacheDir, ['get', 'pdb']);
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stdout, /^NAME\s+MIN AVAILABLE\s+MAX UNAVAILABLE\s+ALLOWED DISRUPTIONS\s+AGE/m);
    assert.match(result.stdout, /^web-pdb\s+2\s+N\/A\s+1\s+\S+/m);
  });

  it('one eviction passes, a second at once is 429 with the budget as cause, and works again once the replacement is Ready', async () => {
    const [first, second] = await settled(3, 1);
    const dry = await evict(first!.metadata.name!, '?dryRun=All');
    assert.equal(dry.status, 201);
    assert.equal((await budget()).disruptionsAllowed, 1, 'a dry run spends nothing');

    const passed = await evict(first!.metadata.name!);
    assert.equal(passed.status, 201, JSON.stringify(passed.json));
    const refused = await evict(second!.metadata.name!);
    assert.equal(refused.status, 429, JSON.stringify(refused.json));
    const body = refused.json as { reason: string; message: string; details: { causes: { reason: string; message: string }[] } };
    assert.equal(body.reason, 'TooManyRequests');
    assert.equal(body.message, VIOLATION);
    assert.equal(body.details.causes.length, 1);
    assert.equal(body.details.causes[0]!.reason, 'DisruptionBudget');
    assert.match(body.details.causes[0]!.message, /^The disruption budget web-pdb needs 2 healthy pods and has [23] currently$/);
    assert.ok(!(await client.get(PODS, NS, second!.metadata.name!))!.metadata.deletionTimestamp, 'the refused pod is untouched');

    const replaced = await settled(3, 1);
    assert.ok(!replaced.some((p) => p.metadata.uid === first!.metadata.uid));
    const again = await evict(second!.metadata.name!);
    assert.equal(again.status, 201, JSON.stringify(again.json));
  });

  it('two concurrent evictions against a budget of 1: exactly one passes', async () => {
    for (let round = 0; round < 3; round++) {
      const [a, b] = await settled(3, 1);
      // No replacement may become Ready meanwhile, so the budget stays spent while both run.
      kubelet.holdReady = true;
      try {
        const results = await Promise.all([evict(a!.metadata.name!), evict(b!.metadata.name!)]);
        assert.deepEqual(results.map((r) => r.status).sort(), [201, 429], JSON.stringify(results.map((r) => r.json)));
        const refused = results[0]!.status === 429 ? a! : b!;
        const kept = await client.get(PODS, NS, refused.metadata.name!);
        assert.ok(kept && kept.metadata.uid === refused.metadata.uid && !kept.metadata.deletionTimestamp, 'the refused pod is untouched');
      } finally {
        kubelet.holdReady = false;
        kubelet.poke();
      }
    }
  });

  it('a pod with two budgets is a 500; a budget changed and not yet observed is a 429', async () => {
    const [victim] = await settled(3, 1);
    await client.create(PODDISRUPTIONBUDGETS, NS, {
      apiVersion: 'policy/v1',
      kind: 'PodDisruptionBudget',
      metadata: { name: 'web-pdb-2' },
      spec: { maxUnavailable: 1, selector: { matchLabels: { app: 'web' } } },
    });
    const two = await evict(victim!.metadata.name!);
    assert.equal(two.status, 500);
    assert.equal(
      (two.json as { message: string }).message,
      'Internal error occurred: This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.',
    );
    await client.delete(PODDISRUPTIONBUDGETS, NS, 'web-pdb-2');

    // A spec change bumps the generation; the first eviction after it may find the status stale.
    await client.patch(PODDISRUPTIONBUDGETS, NS, 'web-pdb', 'merge', { spec: { minAvailable: 3 } });
    await eventually(async () => (await budget()).observedGeneration === 2, 'generation 2 observed');
    assert.equal((await budget()).disruptionsAllowed, 0);
    const blocked = await evict(victim!.metadata.name!);
    assert.equal(blocked.status, 429);
    assert.match(JSON.stringify(blocked.json), /needs 3 healthy pods and has 3 currently/);
    await client.patch(PODDISRUPTIONBUDGETS, NS, 'web-pdb', 'merge', { spec: { minAvailable: 2 } });
  });

  it('kubectl drain completes while the controller replaces pods, retrying the 429s', async () => {
    // Four replicas on three nodes: one node holds two, and a budget of minAvailable 3 lets only
    // one of them go at a time, so drain must wait for a replacement between them.
    await client.patch(DEPLOYMENTS, NS, 'web', 'merge', { spec: { replicas: 4 } });
    await client.patch(PODDISRUPTIONBUDGETS, NS, 'web-pdb', 'merge', { spec: { minAvailable: 3 } });
    const four = await settled(4, 1);
    const perNode = new Map<string, number>();
    for (const p of four) perNode.set(nodeOf(p)!, (perNode.get(nodeOf(p)!) ?? 0) + 1);
    const [busiest, count] = [...perNode].sort((x, y) => y[1] - x[1])[0]!;
    assert.ok(count >= 2, `a node with two web pods: ${JSON.stringify([...perNode])}`);

    const [kubectl] = kubectlClients();
    const started = Date.now();
    const result = await runKubectl(kubectl!, server.kubeconfig, cacheDir, ['drain', busiest, '--ignore-daemonsets', '--timeout=60s'], {
      timeoutMs: 90_000,
    });
    const output = result.stdout + result.stderr;
    assert.equal(result.code, 0, output);
    assert.match(output, new RegExp(`node/${busiest} drained`));
    assert.match(output, /will retry after 5s\): Cannot evict pod as it would violate the pod's disruption budget/);
    console.log(`# drain of ${count} pods under a budget of 1 took ${Date.now() - started} ms`);

    const after = await settled(4, 1);
    assert.ok(after.every((p) => nodeOf(p) !== busiest), 'no web pod left on the drained node');
    await client.patch(NODES, undefined, busiest, 'merge', { spec: { unschedulable: null } });
  });
});

// The API suite needs the built server; say so plainly rather than time out.
if (!fs.existsSync(new URL('../../dist/cli/main.js', import.meta.url))) {
  throw new Error('dist/cli/main.js is missing: run npx tsc -p tsconfig.json first');
}
