import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { nodeLabelViolation, nodeSelfUpdateViolation } from '../../src/cluster/node-authorization.js';
import { joinSecret, runDrover } from '../helpers/agent.js';
import { cleanup, eventually, request, type ServerProcess, serverArgs, startServer, tempDir } from '../helpers/server.js';

/**
 * Node restriction judges what the caller cannot choose: the stored object, not fields the caller
 * puts in its own patch; and a node may not steer work to itself (role labels, taints, cordon).
 */

function node(labels: Record<string, string>, spec: Record<string, unknown> = {}, annotations?: Record<string, string>): KubeObject {
  return { apiVersion: 'v1', kind: 'Node', metadata: { name: 'n1', labels, ...(annotations ? { annotations } : {}) }, spec };
}
const OWN_CORDON = { 'drover.io/shutdown': JSON.stringify({ reason: 'SIGTERM', time: '2026-01-01T00:00:00Z', cordoned: true }) };
const ADMIN_CORDON_RECORD = { 'drover.io/shutdown': JSON.stringify({ reason: 'SIGTERM', time: '2026-01-01T00:00:00Z', cordoned: false }) };

describe('node restriction rules (pure)', () => {
  it('labels a node may set on itself, as kubelet may', () => {
    for (const key of ['kubernetes.io/hostname', 'kubernetes.io/os', 'topology.kubernetes.io/zone', 'node.kubernetes.io/instance-type',
      'kubelet.kubernetes.io/anything', 'example.com/rack', 'plain']) {
      assert.equal(nodeLabelViolation(key), undefined, key);
    }
    for (const key of ['node-role.kubernetes.io/control-plane', 'node-restriction.kubernetes.io/dedicated', 'kubernetes.io/role',
      'foo.k8s.io/x', 'drover.io/state']) {
      assert.ok(nodeLabelViolation(key), key);
    }
  });

  it('labels: adding, changing and removing a reserved label are all refused; unchanged ones are fine', () => {
    const role = { 'node-role.kubernetes.io/worker': 'true' };
    assert.match(nodeSelfUpdateViolation(undefined, node(role)) ?? '', /node-role/);
    assert.match(nodeSelfUpdateViolation(node({}), node(role)) ?? '', /node-role/);
    assert.match(nodeSelfUpdateViolation(node(role), node({})) ?? '', /node-role/, 'removing an admin label');
    assert.equal(nodeSelfUpdateViolation(node(role), node({ ...role, mine: 'x' })), undefined);
    assert.match(nodeSelfUpdateViolation(node({ 'drover.io/state': 'NotReady' }), node({ 'drover.io/state': 'Ready' })) ?? '', /lifecycle/);
  });

  it('taints: set at registration, never changed after', () => {
    const taints = [{ key: 'dedicated', value: 'db', effect: 'NoSchedule' }];
    assert.equal(nodeSelfUpdateViolation(undefined, node({}, { taints })), undefined);
    assert.match(nodeSelfUpdateViolation(node({}, { taints }), node({}, {})) ?? '', /taints/);
    assert.match(nodeSelfUpdateViolation(node({}, {}), node({}, { taints })) ?? '', /taints/);
    assert.equal(nodeSelfUpdateViolation(node({}, { taints }), node({}, { taints })), undefined);
  });

  it('pod CIDR: the allocator’s, never set or changed by the node itself', () => {
    const cidr = { podCIDR: '10.42.3.0/24', podCIDRs: ['10.42.3.0/24'] };
    assert.match(nodeSelfUpdateViolation(undefined, node({}, cidr)) ?? '', /may not set its pod CIDR/);
    assert.match(nodeSelfUpdateViolation(node({}, {}), node({}, cidr)) ?? '', /may not set its pod CIDR/);
    assert.match(nodeSelfUpdateViolation(node({}, cidr), node({}, { podCIDR: '10.42.4.0/24', podCIDRs: ['10.42.4.0/24'] })) ?? '', /may not set its pod CIDR/);
    assert.equal(nodeSelfUpdateViolation(node({}, cidr), node({ mine: 'x' }, cidr)), undefined, 'a write that keeps it');
  });

  it('cordon: only for a planned stop; uncordon only of its own recorded cordon', () => {
    // The agent's planned stop: record cordoned:true and unschedulable in one write.
    assert.equal(nodeSelfUpdateViolation(node({}), node({}, { unschedulable: true }, OWN_CORDON)), undefined);
    // Back from it: both withdrawn.
    assert.equal(nodeSelfUpdateViolation(node({}, { unschedulable: true }, OWN_CORDON), node({}, {})), undefined);
    // Cordoning without a record, uncordoning an admin's cordon, or claiming it afterwards.
    assert.match(nodeSelfUpdateViolation(node({}), node({}, { unschedulable: true })) ?? '', /planned stop/);
    assert.match(nodeSelfUpdateViolation(node({}, { unschedulable: true }), node({}, {})) ?? '', /administrator/);
    assert.match(nodeSelfUpdateViolation(node({}, { unschedulable: true }, ADMIN_CORDON_RECORD), node({}, {})) ?? '', /administrator/);
    assert.match(
      nodeSelfUpdateViolation(node({}, { unschedulable: true }), node({}, { unschedulable: true }, OWN_CORDON)) ?? '',
      /only in the write that cordons it/,
    );
    // A planned stop of an admin-cordoned node records cordoned:false and changes nothing.
    assert.equal(nodeSelfUpdateViolation(node({}, { unschedulable: true }), node({}, { unschedulable: true }, ADMIN_CORDON_RECORD)), undefined);
  });
});

describe('node restriction on a real server', () => {
  let server: ServerProcess;
  const merge = { 'Content-Type': 'application/merge-patch+json' };
  const credentials = new Map<string, string>();

  async function register(name: string, taints?: unknown[]): Promise<string> {
    const registration = await request(server, 'POST', '/drover/v1/register', {
      token: joinSecret(server),
      body: { nodeName: name, nodeId: randomUUID(), password: `${name}-password-0123456789` },
    });
    assert.equal(registration.status, 200, registration.text);
    const token = (registration.json as { token: string }).token;
    const created = await request(server, 'POST', '/api/v1/nodes', {
      token,
      body: { apiVersion: 'v1', kind: 'Node', metadata: { name, labels: { 'kubernetes.io/hostname': name } }, spec: taints ? { taints } : {} },
    });
    assert.equal(created.status, 201, created.text);
    credentials.set(name, token);
    return token;
  }

  before(async () => {
    server = await startServer({ handMadeNodes: true });
    await register('alpha', [{ key: 'dedicated', value: 'db', effect: 'NoSchedule' }]);
    await register('beta');
    const pod = await request(server, 'POST', '/api/v1/namespaces/default/pods', {
      body: { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'on-beta' }, spec: { nodeName: 'beta', containers: [{ name: 'c', image: 'x', command: ['sleep', '1'] }] } },
    });
    assert.equal(pod.status, 201, pod.text);
  });

  after(async () => {
    await cleanup();
  });

  it("a node cannot write another node's pod status by naming itself in the patch (403, pod untouched)", async () => {
    for (const body of [
      { spec: { nodeName: 'alpha' }, status: { phase: 'Failed' } },
      { status: { phase: 'Failed' } },
    ]) {
      const res = await request(server, 'PATCH', '/api/v1/namespaces/default/pods/on-beta/status', {
        token: credentials.get('alpha')!, headers: merge, body,
      });
      assert.equal(res.status, 403, res.text);
      assert.match((res.json as { message: string }).message, /bound to "beta"/);
    }
    const current = await request(server, 'GET', '/api/v1/namespaces/default/pods/on-beta/status');
    const put = await request(server, 'PUT', '/api/v1/namespaces/default/pods/on-beta/status', {
      token: credentials.get('alpha')!,
      body: { ...(current.json as KubeObject), spec: { ...(current.json as KubeObject).spec as object, nodeName: 'alpha' }, status: { phase: 'Failed' } },
    });
    assert.equal(put.status, 403, put.text);
    const pod = (await request(server, 'GET', '/api/v1/namespaces/default/pods/on-beta')).json as KubeObject;
    assert.notEqual((pod.status as { phase?: string } | undefined)?.phase, 'Failed');
    // The pod's own node still may.
    const own = await request(server, 'PATCH', '/api/v1/namespaces/default/pods/on-beta/status', {
      token: credentials.get('beta')!, headers: merge, body: { status: { phase: 'Running' } },
    });
    assert.equal(own.status, 200, own.text);
  });

  it("a node cannot overwrite another node's Event by pointing it at itself (403)", async () => {
    const event = await request(server, 'POST', '/api/v1/namespaces/default/events', {
      token: credentials.get('beta')!,
      body: {
        apiVersion: 'v1', kind: 'Event', metadata: { name: 'beta-event' },
        involvedObject: { kind: 'Node', name: 'beta' }, reason: 'Started', message: 'beta started', type: 'Normal',
      },
    });
    assert.equal(event.status, 201, event.text);
    const hijack = await request(server, 'PATCH', '/api/v1/namespaces/default/events/beta-event', {
      token: credentials.get('alpha')!, headers: merge,
      body: { involvedObject: { kind: 'Node', name: 'alpha' }, message: 'forged' },
    });
    assert.equal(hijack.status, 403, hijack.text);
    const stored = (await request(server, 'GET', '/api/v1/namespaces/default/events/beta-event')).json as { message: string };
    assert.equal(stored.message, 'beta started');
  });

  it('pods/log is not a node verb (403)', async () => {
    const res = await request(server, 'GET', '/api/v1/namespaces/default/pods/on-beta/log', { token: credentials.get('beta')! });
    assert.equal(res.status, 403, res.text);
    const read = await request(server, 'GET', '/api/v1/namespaces/default/pods/on-beta', { token: credentials.get('alpha')! });
    assert.equal(read.status, 200, 'reading pods stays allowed');
  });

  it('a node cannot label itself with roles or restriction labels, nor forge its state label (403)', async () => {
    for (const key of ['node-role.kubernetes.io/control-plane', 'node-restriction.kubernetes.io/dedicated', 'drover.io/state']) {
      const res = await request(server, 'PATCH', '/api/v1/nodes/alpha', {
        token: credentials.get('alpha')!, headers: merge, body: { metadata: { labels: { [key]: 'true' } } },
      });
      assert.equal(res.status, 403, `${key}: ${res.text}`);
      assert.match((res.json as { message: string }).message, new RegExp(key.replace(/[./]/g, '\\$&')));
    }
    const fine = await request(server, 'PATCH', '/api/v1/nodes/alpha', {
      token: credentials.get('alpha')!, headers: merge, body: { metadata: { labels: { 'example.com/rack': 'r1' } } },
    });
    assert.equal(fine.status, 200, fine.text);
    // The admin may set them.
    const admin = await request(server, 'PATCH', '/api/v1/nodes/alpha', {
      headers: merge, body: { metadata: { labels: { 'node-role.kubernetes.io/worker': 'true' } } },
    });
    assert.equal(admin.status, 200, admin.text);
    const remove = await request(server, 'PATCH', '/api/v1/nodes/alpha', {
      token: credentials.get('alpha')!, headers: merge, body: { metadata: { labels: { 'node-role.kubernetes.io/worker': null } } },
    });
    assert.equal(remove.status, 403, `removing an admin's role label: ${remove.text}`);
  });

  it('a node cannot remove its taints or uncordon itself after an admin cordon (403)', async () => {
    const untaint = await request(server, 'PATCH', '/api/v1/nodes/alpha', {
      token: credentials.get('alpha')!, headers: merge, body: { spec: { taints: null } },
    });
    assert.equal(untaint.status, 403, untaint.text);
    assert.match((untaint.json as { message: string }).message, /taints/);
    const cordon = await request(server, 'PATCH', '/api/v1/nodes/beta', { headers: merge, body: { spec: { unschedulable: true } } });
    assert.equal(cordon.status, 200, cordon.text);
    const uncordon = await request(server, 'PATCH', '/api/v1/nodes/beta', {
      token: credentials.get('beta')!, headers: merge, body: { spec: { unschedulable: null } },
    });
    assert.equal(uncordon.status, 403, uncordon.text);
    const nodeBeta = (await request(server, 'GET', '/api/v1/nodes/beta')).json as KubeObject;
    assert.equal((nodeBeta.spec as { unschedulable?: boolean }).unschedulable, true, 'still cordoned');
    const alpha = (await request(server, 'GET', '/api/v1/nodes/alpha')).json as KubeObject;
    assert.equal((alpha.spec as { taints?: unknown[] }).taints?.length, 1, 'still tainted');
  });

  it('a node reads only the ConfigMaps and Secrets its pods use: a Secret no pod of it uses is 403, as is a list of all', async () => {
    const alpha = credentials.get('alpha')!;
    const beta = credentials.get('beta')!;
    const base = '/api/v1/namespaces/default';
    for (const [kind, name] of [['configmaps', 'alpha-config'], ['secrets', 'alpha-secret'], ['secrets', 'unused-secret']] as const) {
      const created = await request(server, 'POST', `${base}/${kind}`, {
        body: { apiVersion: 'v1', kind: kind === 'configmaps' ? 'ConfigMap' : 'Secret', metadata: { name }, data: kind === 'configmaps' ? { k: 'v' } : { k: 'dg==' } },
      });
      assert.equal(created.status, 201, created.text);
    }
    const pod = await request(server, 'POST', `${base}/pods`, {
      body: {
        apiVersion: 'v1', kind: 'Pod', metadata: { name: 'uses-config' },
        spec: {
          nodeName: 'alpha',
          volumes: [{ name: 's', secret: { secretName: 'alpha-secret' } }],
          containers: [{ name: 'c', image: 'x', command: ['sleep', '1'], env: [{ name: 'K', valueFrom: { configMapKeyRef: { name: 'alpha-config', key: 'k' } } }] }],
        },
      },
    });
    assert.equal(pod.status, 201, pod.text);
    const message = (res: { json: unknown }): string => (res.json as { message: string }).message;

    // The graph follows the pods through a watch: allowed as soon as it has seen the pod.
    await eventually(async () => (await request(server, 'GET', `${base}/configmaps/alpha-config`, { token: alpha })).status === 200, 'alpha may read its pod\'s ConfigMap', 20_000);
    assert.equal((await request(server, 'GET', `${base}/secrets/alpha-secret`, { token: alpha })).status, 200);
    // One object by name, as kubelet watches it.
    const byName = await request(server, 'GET', `${base}/secrets?fieldSelector=metadata.name%3Dalpha-secret`, { token: alpha });
    assert.equal(byName.status, 200, byName.text);
    assert.deepEqual((byName.json as { items: KubeObject[] }).items.map((i) => i.metadata.name), ['alpha-secret']);
    const watch = await request(server, 'GET', `${base}/configmaps?watch=true&timeoutSeconds=1&fieldSelector=metadata.name%3Dalpha-config`, { token: alpha });
    assert.equal(watch.status, 200, watch.text);
    assert.match(watch.text, /"name":"alpha-config"/);

    const unused = await request(server, 'GET', `${base}/secrets/unused-secret`, { token: alpha });
    assert.equal(unused.status, 403, unused.text);
    assert.equal(
      message(unused),
      'secrets "unused-secret" is forbidden: User "system:node:alpha" cannot get resource "secrets" in API group "" in the namespace "default": no relationship found between node \'alpha\' and this object',
    );
    const all = await request(server, 'GET', `${base}/secrets`, { token: alpha });
    assert.equal(all.status, 403, all.text);
    assert.match(message(all), /No Object name found/);
    const otherByName = await request(server, 'GET', `${base}/secrets?fieldSelector=metadata.name%3Dunused-secret`, { token: alpha });
    assert.equal(otherByName.status, 403, otherByName.text);
    const write = await request(server, 'PUT', `${base}/configmaps/alpha-config`, {
      token: alpha, body: { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'alpha-config' }, data: { k: 'changed' } },
    });
    assert.equal(write.status, 403, write.text);
    assert.match(message(write), /can only read resources of this type/);
    const otherNode = await request(server, 'GET', `${base}/configmaps/alpha-config`, { token: beta });
    assert.equal(otherNode.status, 403, otherNode.text);
    assert.match(message(otherNode), /no relationship found between node 'beta' and this object/);

    // Once the pod is gone, so is the access.
    const deleted = await request(server, 'DELETE', `${base}/pods/uses-config?gracePeriodSeconds=0`);
    assert.equal(deleted.status, 200, deleted.text);
    await eventually(async () => (await request(server, 'GET', `${base}/configmaps/alpha-config`, { token: alpha })).status === 403, 'access to end with the pod', 20_000);
  });

  it('a node gets ServiceAccount tokens only for the accounts of its own pods, bound to such a pod (TokenRequest)', async () => {
    const alpha = credentials.get('alpha')!;
    const beta = credentials.get('beta')!;
    const base = '/api/v1/namespaces/default';
    const account = await request(server, 'POST', `${base}/serviceaccounts`, { body: { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'builder' } } });
    assert.equal(account.status, 201, account.text);
    for (const name of ['other-account']) {
      const made = await request(server, 'POST', `${base}/serviceaccounts`, { body: { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name } } });
      assert.equal(made.status, 201, made.text);
    }
    const created = await request(server, 'POST', `${base}/pods`, {
      body: {
        apiVersion: 'v1', kind: 'Pod', metadata: { name: 'builds' },
        spec: { nodeName: 'alpha', serviceAccountName: 'builder', containers: [{ name: 'c', image: 'x', command: ['sleep', '1'] }] },
      },
    });
    assert.equal(created.status, 201, created.text);
    const pod = created.json as KubeObject;
    const onBeta = (await request(server, 'GET', `${base}/pods/on-beta`)).json as KubeObject;
    const tokenRequest = (bound?: Record<string, unknown>) => ({
      apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { expirationSeconds: 600, ...(bound ? { boundObjectRef: bound } : {}) },
    });
    const ask = (token: string, accountName: string, bound?: Record<string, unknown>) =>
      request(server, 'POST', `${base}/serviceaccounts/${accountName}/token`, { token, body: tokenRequest(bound) });
    const boundTo = (p: KubeObject) => ({ apiVersion: 'v1', kind: 'Pod', name: p.metadata.name, uid: p.metadata.uid });
    const message = (res: { json: unknown }): string => (res.json as { message: string }).message;

    // Its own pod's account, bound to that pod: a token (once the graph has seen the pod).
    const granted = await eventually(async () => {
      const res = await ask(alpha, 'builder', boundTo(pod));
      return res.status === 201 ? res : undefined;
    }, 'alpha to get a token for its pod', 20_000);
    const status = (granted.json as { status: { token: string } }).status;
    assert.ok(status.token.split('.').length === 3, 'a JWT');
    const who = await request(server, 'POST', '/apis/authentication.k8s.io/v1/selfsubjectreviews', {
      token: status.token, body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' },
    });
    assert.equal(who.status, 201, who.text);
    assert.equal((who.json as { status: { userInfo: { username: string } } }).status.userInfo.username, 'system:serviceaccount:default:builder');

    // An account no pod of the node runs as, the same account from another node: the authorizer says no.
    const unrelated = await ask(alpha, 'other-account', boundTo(pod));
    assert.equal(unrelated.status, 403, unrelated.text);
    assert.match(message(unrelated), /cannot create resource "serviceaccounts\/token".*no relationship found between node 'alpha' and this object/);
    const fromBeta = await ask(beta, 'builder', boundTo(pod));
    assert.equal(fromBeta.status, 403, fromBeta.text);
    assert.match(message(fromBeta), /no relationship found between node 'beta'/);
    // The right account, but not bound to its pod: admission says no.
    const unbound = await ask(alpha, 'builder');
    assert.equal(unbound.status, 403, unbound.text);
    assert.match(message(unbound), /requested a token not bound to a pod/);
    const noUid = await ask(alpha, 'builder', { apiVersion: 'v1', kind: 'Pod', name: 'builds' });
    assert.equal(noUid.status, 403, noUid.text);
    assert.match(message(noUid), /without naming its uid/);
    const otherPod = await ask(alpha, 'builder', boundTo(onBeta));
    assert.equal(otherPod.status, 403, otherPod.text);
    assert.match(message(otherPod), /pod scheduled on a different node/);
    const wrongUid = await ask(alpha, 'builder', { ...boundTo(pod), uid: 'not-the-uid' });
    assert.equal(wrongUid.status, 403, wrongUid.text);
    assert.match(message(wrongUid), /does not match the UID in record/);
    // Reading accounts is no node business.
    assert.equal((await request(server, 'GET', `${base}/serviceaccounts/builder`, { token: alpha })).status, 403);

    // Once the pod is gone, no more tokens.
    const deleted = await request(server, 'DELETE', `${base}/pods/builds?gracePeriodSeconds=0`);
    assert.equal(deleted.status, 200, deleted.text);
    await eventually(async () => (await ask(alpha, 'builder', boundTo(pod))).status === 403, 'token requests to end with the pod', 20_000);
  });

  it('an agent refuses a reserved --node-label at start (exit 78, before anything is written)', async () => {
    const dataDir = tempDir('agent-label');
    const result = await runDrover([
      'agent', '--server', server.url, '--token', 'K10unused::server:secret', '--data-dir', `${dataDir}/data`,
      '--node-label', 'node-role.kubernetes.io/worker=true',
    ]);
    assert.equal(result.code, 78, result.stderr);
    assert.match(result.stderr, /node-label: a node may not set label node-role\.kubernetes\.io\/worker/);
    assert.deepEqual(await import('node:fs').then((fs) => fs.existsSync(`${dataDir}/data`)), false, 'no data dir made');
    // serverArgs is the server's equivalent: the embedded agent validates the same way.
    const refused = await runDrover([...serverArgs(tempDir('server-label'), { embeddedAgent: true }), '--node-label', 'node-restriction.kubernetes.io/x=y']);
    assert.equal(refused.code, 78, refused.stderr);
  });
});
