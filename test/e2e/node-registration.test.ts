import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import {
  exitWithin,
  getNode,
  joinSecret,
  nodeState,
  runDrover,
  serverForSuite,
  serverPairForSuite,
  spawnAgent,
  startAgent,
  waitForNode,
  waitForState,
} from '../helpers/agent.js';
import { MODERN_KUBECTL, runKubectl } from '../helpers/kubectl.js';
import { type ApiResponse, eventually, request, report, type ServerProcess, tempDir } from '../helpers/server.js';

/**
 * Node names and registrations, as docs/security.md describes them, with real servers and real
 * agents: a node name stays bound to its host's password after `kubectl delete node` (which
 * revokes the node's credential, not the binding) until an admin runs `drover node forget`;
 * registrations are limited per source address (failures, new names) without holding back known
 * nodes; and registrations of names that never got a Node object are collected.
 */

const NODE_ID_ANNOTATION = 'drover.io/node-id';
const LEASES = '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases';

type Target = ServerProcess;

/** POST /drover/v1/register as an agent would, from `from` (a loopback source address). */
function register(
  server: Target,
  nodeName: string,
  password: string,
  options: { from?: string; token?: string; nodeId?: string } = {},
): Promise<ApiResponse> {
  return request(server, 'POST', '/drover/v1/register', {
    token: options.token ?? joinSecret(server),
    body: { nodeName, nodeId: options.nodeId ?? randomUUID(), password },
    ...(options.from ? { localAddress: options.from } : {}),
  });
}

function credentialOf(res: ApiResponse): string {
  assert.equal(res.status, 200, `registration: ${res.text}`);
  const token = (res.json as { token?: unknown }).token;
  assert.ok(typeof token === 'string' && token, `a credential in ${res.text}`);
  return token;
}

function message(res: ApiResponse): string {
  return (res.json as { message?: string } | undefined)?.message ?? res.text;
}

/** The status a credential gets for a plain read. */
async function credentialStatus(server: Target, token: string): Promise<number> {
  return (await request(server, 'GET', '/api/v1/nodes', { token })).status;
}

const TAKEN = (name: string): RegExp =>
  new RegExp(`node name "${name}" is already registered by another host \\(node id [0-9a-f-]+, since [0-9T:.Z-]+\\); if that host is gone for good, an admin frees the name with "drover node forget ${name}"`);

// -------------------------------------------------------------------------------------------------

describe('a node name outlives its Node object until drover node forget', () => {
  const kubectlCache = tempDir('kubectl-cache');
  const suite = serverForSuite({}, [kubectlCache]);

  it('kubectl delete node does not free the name: another host is refused (403 naming drover node forget) while the Node is gone, and the real agent comes back', async (t) => {
    const { server } = suite;
    const name = 'keeper';
    const owner = await startAgent({ server, name });
    const first = (await waitForState(server, name, 'Ready')).node;
    const nodeId = first.metadata.annotations?.[NODE_ID_ANNOTATION];
    assert.ok(nodeId);

    // Freeze the real agent so the Node stays gone while another host tries the name.
    process.kill(owner.pid, 'SIGSTOP');
    try {
      const deleted = await runKubectl(MODERN_KUBECTL, server.kubeconfig, kubectlCache, ['delete', 'node', name]);
      assert.equal(deleted.code, 0, deleted.stderr);
      await eventually(async () => (await getNode(server, name)) === undefined || undefined, 'the Node to be gone');

      // Another host (a fresh data dir: another node id and password), holding the join token.
      const intruder = spawnAgent({ server, name });
      const exit = await exitWithin(intruder);
      assert.equal(exit.code, 1, `the other host's agent exits 1; output:\n${intruder.output()}`);
      assert.match(intruder.output(), TAKEN(name));
      report(t, `other host: ${intruder.output().trim().split('\n').at(-1)}`);
      assert.equal(await getNode(server, name), undefined, 'the other host created no Node');
      const direct = await register(server, name, 'another-hosts-password-0123456789');
      assert.equal(direct.status, 403, direct.text);
      assert.match(message(direct), TAKEN(name));
    } finally {
      process.kill(owner.pid, 'SIGCONT');
    }

    // The real host registers again with its password: a new incarnation, the same node id.
    const back = await waitForNode(
      server,
      name,
      (n) => nodeState(n) === 'Ready' && n.metadata.uid !== first.metadata.uid,
      'Ready again as a new incarnation',
      30_000,
    );
    assert.equal(back.node.metadata.annotations?.[NODE_ID_ANNOTATION], nodeId, 'the same host');
    assert.equal(owner.hasExited, false, `the real agent keeps running; output:\n${owner.output()}`);
    assert.match(owner.output(), /registering again/);
    await owner.stop();
  });

  it('the credential of a deleted Node is revoked (401 for reads and lease writes); its host registers again with its password', async (t) => {
    const { server } = suite;
    const name = 'revoked-node';
    const password = 'revoked-node-password-0123456789';
    const token = credentialOf(await register(server, name, password));
    const created = await request(server, 'POST', '/api/v1/nodes', { token, body: { apiVersion: 'v1', kind: 'Node', metadata: { name } } });
    assert.equal(created.status, 201, created.text);
    const uid = (created.json as { metadata: { uid: string } }).metadata.uid;
    assert.equal(await credentialStatus(server, token), 200);

    const deletedAt = Date.now();
    const deleted = await runKubectl(MODERN_KUBECTL, server.kubeconfig, kubectlCache, ['delete', 'node', name]);
    assert.equal(deleted.code, 0, deleted.stderr);
    await eventually(async () => (await credentialStatus(server, token)) === 401, 'the deleted Node’s credential to be refused', 15_000);
    report(t, `credential refused ${Date.now() - deletedAt} ms after kubectl delete node`);
    const lease = {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { name, namespace: 'kube-node-lease' },
      spec: { holderIdentity: `${name}/${uid}`, leaseDurationSeconds: 4, renewTime: new Date().toISOString().replace('Z', '000Z') },
    };
    const leaseWrite = await request(server, 'POST', LEASES, { token, body: lease });
    assert.equal(leaseWrite.status, 401, `a lease write with the revoked credential: ${leaseWrite.text}`);
    const nodeWrite = await request(server, 'POST', '/api/v1/nodes', { token, body: { apiVersion: 'v1', kind: 'Node', metadata: { name } } });
    assert.equal(nodeWrite.status, 401, `recreating the Node with the revoked credential: ${nodeWrite.text}`);

    // The binding stayed: another password is refused, the host's own gets a new credential.
    const other = await register(server, name, 'someone-elses-password-0123456789');
    assert.equal(other.status, 403, other.text);
    assert.match(message(other), TAKEN(name));
    const renewed = credentialOf(await register(server, name, password));
    assert.equal(await credentialStatus(server, renewed), 200);
    assert.equal(await credentialStatus(server, token), 401, 'the revoked credential stays revoked');
  });

  it('drover node forget NAME removes the registration (its credential stops at once) and the Node; the next host takes the name', async (t) => {
    const { server } = suite;
    // A host that is gone for good: its agent killed, its Node left behind.
    const name = 'retired';
    const old = await startAgent({ server, name });
    const oldNode = (await waitForState(server, name, 'Ready')).node;
    await old.stop('SIGKILL');
    const refused = await register(server, name, 'new-hosts-password-0123456789');
    assert.equal(refused.status, 403, refused.text);
    assert.match(message(refused), TAKEN(name));

    // Its embedded-registry advertisement (docs/registry.md), as its agent would have left it.
    const advertisement = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, labels: { 'drover.io/registry-peer': 'true' } }, data: { images: '' } };
    assert.equal((await request(server, 'POST', '/api/v1/namespaces/kube-node-lease/configmaps', { body: advertisement })).status, 201);
    const forgotten = await runDrover(['node', 'forget', name, '--kubeconfig', server.kubeconfig]);
    assert.equal(forgotten.code, 0, forgotten.stderr);
    assert.match(forgotten.stdout, /; its embedded-registry advertisement deleted\./);
    assert.equal((await request(server, 'GET', `/api/v1/namespaces/kube-node-lease/configmaps/${name}`)).status, 404, 'the advertisement goes with the name');
    report(t, forgotten.stdout.trim());
    assert.match(
      forgotten.stdout,
      new RegExp(`node ${name} forgotten: registration of node id ${oldNode.metadata.annotations?.[NODE_ID_ANNOTATION]} removed, its credential revoked on every server; Node object deleted`),
    );
    assert.equal(await getNode(server, name), undefined, 'the Node is gone');
    const events = await request(server, 'GET', '/api/v1/namespaces/kube-system/events');
    const forgetEvent = (events.json as { items: { reason: string; message: string }[] }).items.find((e) => e.reason === 'NodeForgotten');
    assert.match(forgetEvent?.message ?? '', new RegExp(`Node name ${name} forgotten by system:admin`));

    const newHost = await startAgent({ server, name });
    const newNodeId = fs.readFileSync(path.join(newHost.dataDir, 'agent', 'node-id'), 'utf8').trim();
    const taken = await waitForNode(
      server,
      name,
      (n) => nodeState(n) === 'Ready' && n.metadata.annotations?.[NODE_ID_ANNOTATION] === newNodeId,
      'Ready, owned by the new host',
    );
    assert.notEqual(taken.node.metadata.uid, oldNode.metadata.uid);
    await newHost.stop();

    // A live credential stops working the moment its name is forgotten.
    const spare = credentialOf(await register(server, 'spare', 'spare-password-0123456789'));
    assert.equal(await credentialStatus(server, spare), 200);
    // A ConfigMap of the same name that is not an advertisement (no label) is not the node's: it stays.
    const unrelated = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'spare' }, data: { note: 'not an advertisement' } };
    assert.equal((await request(server, 'POST', '/api/v1/namespaces/kube-node-lease/configmaps', { body: unrelated })).status, 201);
    const noNode = await runDrover(['node', 'forget', 'spare', '--kubeconfig', server.kubeconfig]);
    assert.equal(noNode.code, 0, noNode.stderr);
    assert.doesNotMatch(noNode.stdout, /advertisement/);
    assert.equal((await request(server, 'GET', '/api/v1/namespaces/kube-node-lease/configmaps/spare')).status, 200, 'an unlabelled ConfigMap stays');
    assert.match(noNode.stdout, /node spare forgotten: registration of node id [0-9a-f-]+ removed, its credential revoked on every server; there was no Node object/);
    assert.equal(await credentialStatus(server, spare), 401);
  });

  it('forgetting is for admins only, and an unknown or invalid name is a clear error', async () => {
    const { server } = suite;
    const unknown = await runDrover(['node', 'forget', 'never-was', '--kubeconfig', server.kubeconfig]);
    assert.equal(unknown.code, 1);
    assert.match(unknown.stderr, /drover node forget: node "never-was" has no registration and no Node object/);

    const invalid = await request(server, 'DELETE', '/drover/v1/nodes/Not_A_Name');
    assert.equal(invalid.status, 400, invalid.text);
    assert.match(message(invalid), /invalid node name "Not_A_Name"/);

    const nodeToken = credentialOf(await register(server, 'plain-node', 'plain-node-password-0123456789'));
    const asNode = await request(server, 'DELETE', '/drover/v1/nodes/plain-node', { token: nodeToken });
    assert.equal(asNode.status, 403, asNode.text);
    assert.match(message(asNode), /User "system:node:plain-node" is not a cluster admin/);
    const anonymous = await request(server, 'DELETE', '/drover/v1/nodes/plain-node', { token: null });
    assert.equal(anonymous.status, 401, anonymous.text);
    assert.equal(await credentialStatus(server, nodeToken), 200, 'the refused calls changed nothing');
  });
});

// -------------------------------------------------------------------------------------------------

describe('drover node forget on two servers sharing one etcd', () => {
  const pair = serverPairForSuite('forget');

  it('a name forgotten through one server: its credential is refused on the other too, and the name is free there', async (t) => {
    const { a, b } = pair;
    const name = 'roamer';
    const token = credentialOf(await register(a, name, 'roamer-password-0123456789'));
    await eventually(async () => (await credentialStatus(b, token)) === 200, 'server B to accept the credential registered on A');

    const forgotten = await runDrover(['node', 'forget', name, '--kubeconfig', b.kubeconfig]);
    assert.equal(forgotten.code, 0, forgotten.stderr);
    assert.equal(await credentialStatus(b, token), 401, 'B refuses it at once');
    const started = Date.now();
    await eventually(async () => (await credentialStatus(a, token)) === 401, 'server A to refuse the forgotten credential', 10_000);
    report(t, `A refused the forgotten credential ${Date.now() - started} ms after B forgot the name`);
    await eventually(async () => (await register(a, name, 'another-password-0123456789')).status === 200, 'the name to be free on A', 10_000);
  });
});

// -------------------------------------------------------------------------------------------------

describe('registration limits per source address', () => {
  const suite = serverForSuite();

  it('after 10 failed registrations from 127.0.0.1 every registration from it gets 429 with Retry-After; a known node from 127.0.0.5 is not held back; the limit lifts by itself', async (t) => {
    const { server } = suite;
    const name = 'steady';
    const password = 'steady-password-0123456789';
    credentialOf(await register(server, name, password, { from: '127.0.0.5' }));

    // Failures from 127.0.0.1 (wrong token, wrong password), each followed by a registration with
    // the right password, until that one is refused: the source is then held back as a whole.
    const started = Date.now();
    const failures: number[] = [];
    let limited: ApiResponse | undefined;
    while (failures.length < 60) {
      const i = failures.length;
      const failed = i % 2 === 0
        ? await register(server, `probe-${i}`, 'whatever-0123456789', { token: 'not-the-join-secret' })
        : await register(server, name, `guess-${i}-0123456789`);
      failures.push(failed.status);
      const probe = await register(server, name, password);
      if (probe.status === 429) {
        limited = probe;
        break;
      }
      credentialOf(probe);
    }
    const elapsed = Date.now() - started;
    assert.ok(limited, `never limited after ${failures.length} failures`);
    report(t, `429 after ${failures.length} failures in ${elapsed} ms, Retry-After: ${limited.headers['retry-after']} s`);
    assert.ok(failures.every((code, i) => code === (i % 2 === 0 ? 401 : 403)), `failures: ${failures.join(' ')}`);
    // Ten at once; more only as the bucket refilled (one every 6 s) while they were sent.
    assert.ok(failures.length >= 10, `limited after only ${failures.length} failures`);
    assert.ok(failures.length <= 10 + Math.ceil(elapsed / 6000), `${failures.length} failures let through in ${elapsed} ms`);
    assert.equal(limited.status, 429, limited.text);
    const retryAfter = Number(limited.headers['retry-after']);
    assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 6, `Retry-After: ${limited.headers['retry-after']}`);
    const status = limited.json as { reason?: string; details?: { retryAfterSeconds?: number } };
    assert.equal(status.reason, 'TooManyRequests');
    assert.equal(status.details?.retryAfterSeconds, retryAfter);
    assert.match(message(limited), /too many failed node registrations from 127\.0\.0\.1; try again in \d+ s/);

    // The known node, from its own address, registers as usual, again and again.
    for (let i = 0; i < 3; i++) {
      const again = credentialOf(await register(server, name, password, { from: '127.0.0.5' }));
      assert.equal(await credentialStatus(server, again), 200);
    }
    // The limit lifts as the bucket refills: the right password works again from 127.0.0.1.
    await eventually(async () => (await register(server, name, password)).status === 200, 'registrations from 127.0.0.1 to be admitted again', 60_000, 1000);
  });

  it('30 new names from one source, then 429; the same source still re-registers known names, another source still registers new ones', async (t) => {
    const { server } = suite;
    const from = '127.0.0.6';
    const started = Date.now();
    let limited: ApiResponse | undefined;
    let registered = 0;
    while (registered < 200) {
      const res = await register(server, `burst-${registered}`, `burst-${registered}-password-0123456789`, { from });
      if (res.status === 429) {
        limited = res;
        break;
      }
      credentialOf(res);
      registered++;
    }
    const elapsed = Date.now() - started;
    report(t, `${registered} new names registered in ${elapsed} ms, then 429`);
    assert.ok(limited, `never limited after ${registered} new names`);
    // Thirty at once; more only as the bucket refilled (one every 2 s) while they were sent.
    assert.ok(registered >= 30, `limited after only ${registered} new names`);
    assert.ok(registered <= 30 + Math.ceil(elapsed / 2000), `${registered} new names let through in ${elapsed} ms`);
    assert.match(message(limited), new RegExp(`too many registrations of new node names from 127\\.0\\.0\\.6 \\(registering "burst-${registered}"\\); try again in \\d+ s`));
    assert.ok(Number(limited.headers['retry-after']) >= 1, `Retry-After: ${limited.headers['retry-after']}`);

    credentialOf(await register(server, 'burst-0', 'burst-0-password-0123456789', { from }));
    credentialOf(await register(server, `burst-${registered}`, `burst-${registered}-password-0123456789`, { from: '127.0.0.7' }));
  });
});

// -------------------------------------------------------------------------------------------------

describe('registrations of names that never got a Node are collected', () => {
  const TTL_MS = 3000;
  const suite = serverForSuite({ env: { ...process.env, DROVER_TEST_UNUSED_NODE_RECORD_TTL_MS: String(TTL_MS) } });

  it('a registration whose Node never appeared is removed after the TTL (credential refused, name free); one whose node ran stays, Node or not', async (t) => {
    const { server } = suite;
    // A node that ran (a real agent), then was deleted and its agent stopped: its binding stays.
    const ran = await startAgent({ server, name: 'ran' });
    await waitForState(server, 'ran', 'Ready');
    await ran.stop('SIGKILL');
    const deleted = await request(server, 'DELETE', '/api/v1/nodes/ran');
    assert.equal(deleted.status, 200, deleted.text);

    // Registered after "ran", and after it in key order: the sweep that collects it has checked "ran".
    const sentAt = Date.now();
    const ghost = credentialOf(await register(server, 'zz-ghost', 'ghost-password-0123456789'));
    await eventually(async () => (await credentialStatus(server, ghost)) === 401, 'the unused registration to be collected', 60_000, 200);
    report(t, `collected ${Date.now() - sentAt} ms after registration (TTL ${TTL_MS} ms)`);
    assert.ok(Date.now() - sentAt >= TTL_MS, 'not before the TTL');
    // The log line is written as the record goes; it reaches this process through a pipe a moment later.
    await eventually(
      () => /removed the registration of a node name that never had a Node object/.test(server.output()),
      'the log line of the collection',
      30_000,
    );
    credentialOf(await register(server, 'zz-ghost', 'a-new-hosts-password-0123456789'));

    const other = await register(server, 'ran', 'a-new-hosts-password-0123456789');
    assert.equal(other.status, 403, other.text);
    assert.match(message(other), TAKEN('ran'));
    const back = spawnAgent({ server, name: 'ran', dataDir: ran.dataDir });
    await waitForState(server, 'ran', 'Ready');
    await back.stop();
  });
});
