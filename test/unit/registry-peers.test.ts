import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { rankPeers } from '../../src/agent/registry-peers/directory.js';
import { NodeAuthorizer } from '../../src/cluster/node-authorization.js';
import { resolvedThroughPeers } from '../../src/images/registry/peers.js';
import { parseRegistries } from '../../src/images/registry/registries.js';
import { parseImageRef } from '../../src/images/reference.js';
import { decodeAdvertisement, encodeAdvertisement, MAX_ADVERTISED_IMAGES } from '../../src/node-protocol/registry-peers.js';

/**
 * The pure rules of pulling through embedded-registry peers (docs/registry.md): the advertisement
 * format, which images go through peers, the order peers are tried in, and what node
 * authorization lets a node do with advertisements.
 */

const d = (n: number): string => `sha256:${n.toString(16).padStart(64, '0')}`;

describe('peer advertisements: format', () => {
  it('round-trips, sorted (the same images give the same text: no needless write), the platform manifest only when it differs', () => {
    const text = encodeAdvertisement([
      { ref: 'registry.example/b:1', digest: d(2), manifestDigest: d(3) },
      { ref: 'docker.io/library/a:1', digest: d(1), manifestDigest: d(1) },
    ]);
    assert.equal(text, `docker.io/library/a:1 ${d(1)}\nregistry.example/b:1 ${d(2)} ${d(3)}`);
    assert.deepEqual(decodeAdvertisement(text), [
      { ref: 'docker.io/library/a:1', digest: d(1) },
      { ref: 'registry.example/b:1', digest: d(2), manifestDigest: d(3) },
    ]);
  });

  it('skips malformed lines rather than failing the whole object (another writer, a newer format)', () => {
    const text = [`ok:1 ${d(1)}`, 'no-digest', `bad ${'sha256:xyz'}`, `extra:1 ${d(1)} ${d(2)} more`, `third:1 ${d(1)} notadigest`, ''].join('\n');
    assert.deepEqual(decodeAdvertisement(text), [{ ref: 'ok:1', digest: d(1) }]);
    assert.deepEqual(decodeAdvertisement(undefined), []);
  });

  it(`caps at ${MAX_ADVERTISED_IMAGES} lines`, () => {
    const many = Array.from({ length: MAX_ADVERTISED_IMAGES + 5 }, (_, i) => ({ ref: `r/i:${i}`, digest: d(i + 1) }));
    assert.equal(encodeAdvertisement(many).split('\n').length, MAX_ADVERTISED_IMAGES);
  });
});

describe('which images are resolved through peers', () => {
  const yaml = (text: string) => parseRegistries(text, 'registries.yaml');
  const cases: [string, string, string, boolean][] = [
    ['listed with endpoints', 'mirrors:\n  docker.io:\n    endpoint: ["https://m.example"]\n', 'busybox:1.36', true],
    ['listed with nothing under it (K3s)', 'mirrors:\n  docker.io:\n', 'busybox:1.36', true],
    ['"*" lists every registry', 'mirrors:\n  "*":\n', 'registry.example:5000/team/app:v1', true],
    ['a registry not listed', 'mirrors:\n  docker.io:\n', 'registry.example/team/app:v1', false],
    ['no mirrors at all', 'configs: {}\n', 'busybox:1.36', false],
    [':latest is not', 'mirrors:\n  "*":\n', 'busybox:latest', false],
    ['no tag (latest) is not', 'mirrors:\n  "*":\n', 'busybox', false],
    [':latest pinned by digest is', 'mirrors:\n  "*":\n', `busybox:latest@${d(9)}`, true],
  ];
  for (const [what, text, image, expected] of cases) {
    it(`${what}: ${expected}`, () => assert.equal(resolvedThroughPeers(yaml(text), parseImageRef(image)), expected));
  }
});

describe('the order peers are tried in', () => {
  it('Ready first, then fewest pulls in flight, then fewest recent failures, then the random tie-break', () => {
    const order = rankPeers([
      { name: 'notready-idle', ready: false, busy: 0, failed: 0, tie: 0 },
      { name: 'ready-busy', ready: true, busy: 2, failed: 0, tie: 0 },
      { name: 'ready-failing', ready: true, busy: 0, failed: 3, tie: 0 },
      { name: 'ready-b', ready: true, busy: 0, failed: 0, tie: 0.9 },
      { name: 'ready-a', ready: true, busy: 0, failed: 0, tie: 0.1 },
    ]);
    assert.deepEqual(order, ['ready-a', 'ready-b', 'ready-failing', 'ready-busy', 'notready-idle']);
  });
});

describe('node authorization of advertisements (ConfigMaps in kube-node-lease)', () => {
  const authorizer = new NodeAuthorizer({ authorize: () => ({ allowed: false, reason: 'not a node' }) });
  const user = { name: 'system:node:n1', groups: ['system:nodes', 'system:authenticated'] };
  const ask = (verb: string, namespace: string, name?: string) =>
    authorizer.authorize(user, { verb, group: '', version: 'v1', resource: 'configmaps', namespace, ...(name ? { name } : {}) } as never).allowed;

  it('reads all, writes only its own; elsewhere the pod-graph rule still holds', () => {
    for (const verb of ['get', 'list', 'watch']) assert.equal(ask(verb, 'kube-node-lease', verb === 'get' ? 'n2' : undefined), true, verb);
    assert.equal(ask('create', 'kube-node-lease'), true, 'create (admission checks the name)');
    for (const verb of ['update', 'patch', 'delete']) {
      assert.equal(ask(verb, 'kube-node-lease', 'n1'), true, `${verb} its own`);
      assert.equal(ask(verb, 'kube-node-lease', 'n2'), false, `${verb} another's`);
    }
    assert.equal(ask('list', 'kube-system'), false, 'no list of ConfigMaps elsewhere');
    assert.equal(ask('create', 'default'), false, 'no writes elsewhere');
  });
});
