/**
 * Drover through the official JavaScript client, @kubernetes/client-node 1.4 (the last line that
 * runs on Node 20), configured from the kubeconfig the server writes: typed CoreV1 and
 * CoordinationV1 calls, the three patch types, Watch, and error mapping.
 *
 * Run: node --import tsx --test test/e2e/client-node.test.ts
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import * as k8s from '@kubernetes/client-node';

import { cleanup, eventually, request, type ServerProcess, startServer } from '../helpers/server.js';

let server: ServerProcess;
let kc: k8s.KubeConfig;
let core: k8s.CoreV1Api;
let coordination: k8s.CoordinationV1Api;
const controllers: AbortController[] = [];

/** Labels a test set, without the ones Drover's node lifecycle controller stamps (drover.io/). */
function ownLabels(labels: Record<string, string> | undefined): Record<string, string> {
  return Object.fromEntries(Object.entries(labels ?? {}).filter(([key]) => !key.startsWith('drover.io/')));
}

before(async () => {
  // No embedded agent (the helper's default), and a grace period that keeps the lifecycle
  // controller from declaring these heartbeat-less test nodes lost (and tainting them) mid-test.
  server = await startServer({ args: ['--node-monitor-grace-period', '1h'] });
  kc = new k8s.KubeConfig();
  kc.loadFromFile(server.kubeconfig);
  core = kc.makeApiClient(k8s.CoreV1Api);
  coordination = kc.makeApiClient(k8s.CoordinationV1Api);
});

after(async () => {
  for (const controller of controllers) controller.abort();
  await cleanup(server?.dataDir ?? '');
});

/** Fail instead of hanging when a promise does not settle in time. */
function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms`)), ms);
    }),
  ]);
}

describe('@kubernetes/client-node 1.4 against drover', () => {
  it('loads the kubeconfig the server wrote (https with its CA and the admin token)', () => {
    const cluster = kc.getCurrentCluster();
    assert.ok(cluster);
    assert.equal(cluster.server, server.url);
    assert.equal(cluster.skipTLSVerify, false, 'the CA is verified, not skipped');
    assert.ok(cluster.caData ?? cluster.caFile, 'the kubeconfig carries the CA');
    assert.equal(kc.getCurrentUser()?.token, server.token);
  });

  it('lists, creates, reads and deletes nodes', async () => {
    const empty = await core.listNode();
    assert.deepEqual(empty.items, []);
    assert.match(empty.metadata?.resourceVersion ?? '', /^\d+$/);

    const created = await core.createNode({
      body: {
        apiVersion: 'v1',
        kind: 'Node',
        metadata: { name: 'cn-node-1', labels: { 'kubernetes.io/hostname': 'cn-node-1' } },
        spec: { podCIDR: '10.42.1.0/24' },
      },
    });
    assert.equal(created.metadata?.name, 'cn-node-1');
    assert.match(created.metadata?.uid ?? '', /^[0-9a-f-]{36}$/);
    assert.equal(created.metadata?.generation, 1);
    assert.ok(created.metadata?.creationTimestamp instanceof Date, 'creationTimestamp parses as a Date');

    const read = await core.readNode({ name: 'cn-node-1' });
    assert.equal(read.metadata?.uid, created.metadata?.uid);
    assert.equal(read.spec?.podCIDR, '10.42.1.0/24');
    assert.equal(read.metadata?.labels?.['kubernetes.io/hostname'], 'cn-node-1');

    const list = await core.listNode({ labelSelector: 'kubernetes.io/hostname=cn-node-1' });
    assert.deepEqual(list.items.map((n) => n.metadata?.name), ['cn-node-1']);
    const none = await core.listNode({ labelSelector: 'kubernetes.io/hostname=someone-else' });
    assert.deepEqual(none.items, []);

    await core.createNode({ body: { metadata: { name: 'cn-node-2' } } });
    // The generated client types the DELETE response as V1Status and keeps only Status fields
    // of the returned object, so only success is checked here (api.test.ts checks the body).
    await core.deleteNode({ name: 'cn-node-2' });
    await assert.rejects(core.readNode({ name: 'cn-node-2' }), (error: unknown) => error instanceof k8s.ApiException && error.code === 404);
  });

  it('patches a node with a strategic merge patch, a JSON merge patch and a JSON patch', async () => {
    await core.createNode({
      body: { metadata: { name: 'cn-patch', labels: { keep: 'yes', drop: 'yes' } }, spec: { podCIDR: '10.42.2.0/24' } },
    });

    const cordoned = await core.patchNode(
      { name: 'cn-patch', body: { spec: { unschedulable: true } } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.StrategicMergePatch),
    );
    assert.equal(cordoned.spec?.unschedulable, true);
    assert.equal(cordoned.spec?.podCIDR, '10.42.2.0/24');

    const tainted = await core.patchNode(
      { name: 'cn-patch', body: { spec: { taints: [{ key: 'dedicated', value: 'infra', effect: 'NoSchedule' }] } } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.StrategicMergePatch),
    );
    assert.deepEqual(
      tainted.spec?.taints?.map((t) => [t.key, t.value, t.effect]),
      [['dedicated', 'infra', 'NoSchedule']],
    );
    assert.equal(tainted.spec?.unschedulable, true);

    const merged = await core.patchNode(
      { name: 'cn-patch', body: { metadata: { labels: { drop: null, added: 'yes' } }, spec: { unschedulable: null } } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
    assert.deepEqual(ownLabels(merged.metadata?.labels), { keep: 'yes', added: 'yes' });
    assert.equal(merged.spec?.unschedulable, undefined);

    // Without a Content-Type option the client sends a JSON patch (its first preference).
    const jsonPatched = await core.patchNode({
      name: 'cn-patch',
      body: [{ op: 'replace', path: '/metadata/labels/keep', value: 'still' }],
    });
    assert.equal(jsonPatched.metadata?.labels?.keep, 'still');

    const status = await core.patchNodeStatus(
      { name: 'cn-patch', body: { status: { conditions: [{ type: 'Ready', status: 'True', reason: 'KubeletReady', message: 'ok' }] } } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
    assert.equal(status.status?.conditions?.[0]?.type, 'Ready');

    const read = await core.readNode({ name: 'cn-patch' });
    assert.equal(read.metadata?.labels?.keep, 'still');
    assert.equal(read.status?.conditions?.[0]?.status, 'True');
  });

  it('a Watch on /api/v1/nodes resolves promptly and sees changes made by another client', async () => {
    const seen: { type: string; name: string; rv: string }[] = [];
    let doneError: unknown = 'not called';
    // From the current resourceVersion there is nothing to send at first, so watch() resolves only
    // if the server flushes the response headers before any event.
    const resourceVersion = (await core.listNode()).metadata?.resourceVersion;
    assert.ok(resourceVersion);
    const watch = new k8s.Watch(kc);
    // Without the flush watch() would wait for the first event, which only comes below: the
    // ceiling is generous, the proof is that it resolved before any change was made.
    const controller = await within(
      watch.watch(
        '/api/v1/nodes',
        { allowWatchBookmarks: true, resourceVersion },
        (type, obj: k8s.V1Node) => {
          seen.push({ type, name: obj.metadata?.name ?? '', rv: obj.metadata?.resourceVersion ?? '' });
        },
        (error) => {
          doneError = error;
        },
      ),
      20_000,
      'watch.watch() (are the response headers flushed?)',
    );
    controllers.push(controller);
    assert.equal(doneError, 'not called', 'the watch is still open');
    assert.deepEqual(seen.filter((e) => e.type !== 'BOOKMARK'), [], 'resolved before any event was sent');

    // Another client (plain HTTPS) makes the changes.
    const created = await request(server, 'POST', '/api/v1/nodes', { body: { metadata: { name: 'cn-watched' } } });
    assert.equal(created.status, 201, created.text);
    const modified = await request(server, 'PATCH', '/api/v1/nodes/cn-watched', {
      headers: { 'Content-Type': 'application/merge-patch+json' },
      body: { metadata: { labels: { changed: 'true' } } },
    });
    assert.equal(modified.status, 200, modified.text);
    const deleted = await request(server, 'DELETE', '/api/v1/nodes/cn-watched');
    assert.equal(deleted.status, 200, deleted.text);

    const events = await eventually(
      () => {
        const mine = seen.filter((e) => e.name === 'cn-watched');
        return mine.some((e) => e.type === 'DELETED') && mine;
      },
      'DELETED for cn-watched',
      10_000,
    ).catch((error: unknown) => {
      throw new Error(`${String(error)}; seen ${JSON.stringify(seen)}`);
    });
    // The controller may stamp the node in between (more MODIFIED events); ours are all there, in order.
    const types = events.map((e) => e.type);
    assert.equal(types[0], 'ADDED', JSON.stringify(events));
    assert.equal(types.at(-1), 'DELETED', JSON.stringify(events));
    assert.ok(types.slice(1, -1).every((t) => t === 'MODIFIED'), JSON.stringify(events));
    assert.equal(events[0]!.rv, (created.json as k8s.V1Node).metadata?.resourceVersion);
    assert.ok(events.some((e) => e.type === 'MODIFIED' && e.rv === (modified.json as k8s.V1Node).metadata?.resourceVersion), JSON.stringify(events));
    // kube-apiserver answers a Node's DELETE with a Status of Success naming its uid.
    const status = deleted.json as k8s.V1Status;
    assert.equal(status.kind, 'Status');
    assert.equal(status.status, 'Success');
    assert.equal(status.details?.uid, (created.json as k8s.V1Node).metadata?.uid);
    const rvs = events.map((e) => Number(e.rv));
    assert.deepEqual([...rvs].sort((a, b) => a - b), rvs, 'in resourceVersion order');
    assert.ok(
      seen.every((e) => e.type === 'BOOKMARK' || Number(e.rv) > Number(resourceVersion)),
      'only changes after the resourceVersion the watch started from',
    );

    controller.abort();
    await eventually(() => doneError !== 'not called', 'the done callback after abort', 20_000);
  });

  it('creates, reads and replaces a Lease in kube-node-lease', async () => {
    const renewTime = new Date(Date.UTC(2026, 0, 2, 3, 4, 5, 678));
    const created = await coordination.createNamespacedLease({
      namespace: 'kube-node-lease',
      body: {
        apiVersion: 'coordination.k8s.io/v1',
        kind: 'Lease',
        metadata: { name: 'cn-lease' },
        spec: { holderIdentity: 'cn-node-1', leaseDurationSeconds: 40, renewTime: renewTime as unknown as k8s.V1MicroTime },
      },
    });
    assert.equal(created.metadata?.namespace, 'kube-node-lease');
    assert.equal(created.spec?.holderIdentity, 'cn-node-1');

    const read = await coordination.readNamespacedLease({ name: 'cn-lease', namespace: 'kube-node-lease' });
    assert.equal(read.spec?.leaseDurationSeconds, 40);
    assert.equal(new Date(read.spec?.renewTime as unknown as string).getTime(), renewTime.getTime());

    const later = new Date(renewTime.getTime() + 10_000);
    read.spec = { ...read.spec, renewTime: later as unknown as k8s.V1MicroTime, holderIdentity: 'cn-node-1-restarted' };
    const replaced = await coordination.replaceNamespacedLease({ name: 'cn-lease', namespace: 'kube-node-lease', body: read });
    assert.equal(replaced.spec?.holderIdentity, 'cn-node-1-restarted');
    assert.ok(Number(replaced.metadata?.resourceVersion) > Number(created.metadata?.resourceVersion));
    assert.equal(replaced.metadata?.uid, created.metadata?.uid);

    // A replace with the stale object is a 409 Conflict.
    await assert.rejects(
      coordination.replaceNamespacedLease({ name: 'cn-lease', namespace: 'kube-node-lease', body: created }),
      (error: unknown) => error instanceof k8s.ApiException && error.code === 409,
    );

    const listed = await coordination.listNamespacedLease({ namespace: 'kube-node-lease' });
    assert.deepEqual(
      listed.items.filter((l) => l.metadata?.name === 'cn-lease').map((l) => l.spec?.holderIdentity),
      ['cn-node-1-restarted'],
    );
  });

  it('creates an event and finds it across namespaces', async () => {
    const created = await core.createNamespacedEvent({
      namespace: 'default',
      body: {
        metadata: { name: 'cn-event-target.test' },
        involvedObject: { kind: 'Node', name: 'cn-event-target', uid: 'cn-event-target' },
        reason: 'ClientNodeTest',
        message: 'Node cn-event-target was looked at by a test',
        type: 'Normal',
        source: { component: 'client-node-test', host: 'cn-event-target' },
        count: 1,
      },
    });
    assert.equal(created.metadata.namespace, 'default');

    const all = await core.listEventForAllNamespaces();
    assert.ok(all.items.some((e) => e.metadata.name === 'cn-event-target.test'));
    const selected = await core.listEventForAllNamespaces({ fieldSelector: 'involvedObject.name=cn-event-target,involvedObject.kind=Node' });
    assert.deepEqual(selected.items.map((e) => [e.metadata.namespace, e.metadata.name, e.reason]), [['default', 'cn-event-target.test', 'ClientNodeTest']]);
    assert.equal(selected.items[0]!.source?.component, 'client-node-test');
    const other = await core.listEventForAllNamespaces({ fieldSelector: 'involvedObject.name=someone-else' });
    assert.deepEqual(other.items, []);
  });

  it('a missing object surfaces as an ApiException with code 404 and a Status body', async () => {
    await assert.rejects(core.readNode({ name: 'no-such-node' }), (error: unknown) => {
      assert.ok(error instanceof k8s.ApiException, `expected an ApiException, got ${String(error)}`);
      assert.equal(error.code, 404);
      const body = (typeof error.body === 'string' ? JSON.parse(error.body) : error.body) as { kind?: string; reason?: string; message?: string };
      assert.equal(body.kind, 'Status');
      assert.equal(body.reason, 'NotFound');
      assert.equal(body.message, 'nodes "no-such-node" not found');
      return true;
    });
    await assert.rejects(
      coordination.readNamespacedLease({ name: 'nope', namespace: 'kube-node-lease' }),
      (error: unknown) => error instanceof k8s.ApiException && error.code === 404,
    );
    await assert.rejects(
      core.createNamespacedPod({ namespace: 'no-such-namespace', body: { metadata: { name: 'p' }, spec: { containers: [{ name: 'c', image: 'i', command: ['sleep', '1'] }] } } }),
      (error: unknown) => error instanceof k8s.ApiException && error.code === 404,
    );
  });
});
