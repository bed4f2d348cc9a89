import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseChallenges } from '../../src/images/registry/auth.js';
import { credentialFromConfig, credentialsFor, parseDockerConfigSecret } from '../../src/images/registry/credentials.js';
import { choosePlatform, parsePullable } from '../../src/images/registry/manifest.js';
import { type Descriptor, MEDIA_TYPES as MEDIA } from '../../src/images/oci.js';

/** Registry credentials (pull secrets, registries.yaml), auth challenges, manifests and platforms: pure. */

const b64 = (text: string): string => Buffer.from(text).toString('base64');
const dockerConfigJson = (auths: unknown): Record<string, string> => ({ '.dockerconfigjson': b64(JSON.stringify({ auths })) });

describe('pull secrets', () => {
  it('.dockerconfigjson: username/password, or auth (base64 user:pass) which wins, and identity tokens', () => {
    const parsed = parseDockerConfigSecret(
      dockerConfigJson({
        'registry.local:5000': { username: 'ann', password: 'pw' },
        'https://index.docker.io/v1/': { auth: b64('bob:hub:pw'), username: 'ignored' },
        'quay.io': { identitytoken: 'refresh-me' },
      }),
      'secret default/pull',
    );
    assert.equal(parsed.kind, 'ok');
    if (parsed.kind !== 'ok') return;
    assert.deepEqual(parsed.entries, [
      { key: 'registry.local:5000', username: 'ann', password: 'pw', source: 'secret default/pull' },
      { key: 'https://index.docker.io/v1/', username: 'bob', password: 'hub:pw', source: 'secret default/pull' },
      { key: 'quay.io', identityToken: 'refresh-me', source: 'secret default/pull' },
    ]);
  });

  it('.dockercfg (the map itself) is read too; anything else is a clear message, never the secret', () => {
    const old = parseDockerConfigSecret({ '.dockercfg': b64(JSON.stringify({ 'r.local': { auth: b64('u:p') } })) }, 'secret ns/old');
    assert.deepEqual(old.kind === 'ok' && old.entries, [{ key: 'r.local', username: 'u', password: 'p', source: 'secret ns/old' }]);
    assert.deepEqual(parseDockerConfigSecret({ other: 'eA==' }, 'secret ns/x'), { kind: 'invalid', message: 'secret ns/x has no .dockerconfigjson or .dockercfg key' });
    assert.deepEqual(parseDockerConfigSecret({ '.dockerconfigjson': b64('{"auths": 3}') }, 'secret ns/x'), {
      kind: 'invalid',
      message: 'secret ns/x: .dockerconfigjson has no "auths" map',
    });
    const broken = parseDockerConfigSecret({ '.dockerconfigjson': b64('{"auths": {"h": {"password": "hunter2"') }, 'secret ns/x');
    assert.equal(broken.kind, 'invalid');
    assert.ok(!JSON.stringify(broken).includes('hunter2'));
  });

  it("which entries apply where, as kubelet's keyring matches: host globs, same port, path prefix, longest first", () => {
    const parsed = parseDockerConfigSecret(
      dockerConfigJson({
        'registry.local:5000': { username: 'port' },
        'registry.local': { username: 'noport' },
        'registry.local:5000/team': { username: 'team' },
        '*.example.com': { username: 'glob' },
        'https://index.docker.io/v1/': { username: 'hub' },
      }),
      's',
    );
    assert.equal(parsed.kind, 'ok');
    if (parsed.kind !== 'ok') return;
    const names = (host: string, repo: string): (string | undefined)[] => credentialsFor(parsed.entries, host, repo).map((c) => c.username);
    assert.deepEqual(names('registry.local:5000', 'team/app'), ['team', 'port']);
    assert.deepEqual(names('registry.local:5000', 'other/app'), ['port']);
    assert.deepEqual(names('registry.local', 'app'), ['noport']);
    assert.deepEqual(names('registry.local:6000', 'app'), []);
    assert.deepEqual(names('a.example.com', 'app'), ['glob']);
    assert.deepEqual(names('a.b.example.com', 'app'), []);
    // Docker Hub answers to several names.
    assert.deepEqual(names('registry-1.docker.io', 'library/busybox'), ['hub']);
    assert.deepEqual(names('docker.io', 'library/busybox'), ['hub']);
  });

  it('registries.yaml auth: username/password, auth, identity_token; nothing usable is no credential', () => {
    assert.deepEqual(credentialFromConfig({ auth: b64('u:p') }, 'cfg'), { username: 'u', password: 'p', source: 'cfg' });
    assert.deepEqual(credentialFromConfig({ identityToken: 't' }, 'cfg'), { identityToken: 't', source: 'cfg' });
    assert.equal(credentialFromConfig({}, 'cfg'), undefined);
    assert.equal(credentialFromConfig(undefined, 'cfg'), undefined);
  });
});

describe('WWW-Authenticate challenges', () => {
  it('bearer with quoted params, basic, several in one header', () => {
    assert.deepEqual(parseChallenges('Bearer realm="https://auth.example.com/token",service="registry.example.com",scope="repository:a/b:pull"'), [
      { scheme: 'bearer', params: { realm: 'https://auth.example.com/token', service: 'registry.example.com', scope: 'repository:a/b:pull' } },
    ]);
    assert.deepEqual(parseChallenges('Basic realm="Registry Realm"'), [{ scheme: 'basic', params: { realm: 'Registry Realm' } }]);
    assert.deepEqual(parseChallenges('Basic realm="r", Bearer realm="https://t/x", service=svc'), [
      { scheme: 'basic', params: { realm: 'r' } },
      { scheme: 'bearer', params: { realm: 'https://t/x', service: 'svc' } },
    ]);
    assert.deepEqual(parseChallenges('Bearer realm="a\\"b"'), [{ scheme: 'bearer', params: { realm: 'a"b' } }]);
    assert.deepEqual(parseChallenges(''), []);
  });
});

const digest = (c: string): string => `sha256:${c.repeat(64)}`;
const image = (extra: Record<string, unknown> = {}): Buffer =>
  Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: MEDIA.ociManifest,
      config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: digest('c'), size: 10 },
      layers: [{ mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', digest: digest('1'), size: 100 }],
      ...extra,
    }),
  );

describe('manifests', () => {
  it('an image manifest: its config and layers', () => {
    const parsed = parsePullable(image(), MEDIA.ociManifest);
    assert.deepEqual(parsed.kind === 'manifest' && parsed.manifest.layers.map((l) => l.digest), [digest('1')]);
  });

  it('refuses schema 1, non-image configs, layer types a node cannot unpack and broken descriptors', () => {
    assert.throws(() => parsePullable(Buffer.from('{"schemaVersion":1}'), 'application/vnd.docker.distribution.manifest.v1+prettyjws'), /schema 1 manifests are not supported/);
    assert.throws(() => parsePullable(Buffer.from('{"schemaVersion":1}'), 'application/json'), /schemaVersion 1/);
    assert.throws(() => parsePullable(image({ config: { mediaType: 'application/vnd.cncf.helm.config.v1+json', digest: digest('c'), size: 1 } }), undefined), /not a container image/);
    assert.throws(() => parsePullable(image({ layers: [{ mediaType: 'application/x-thing', digest: digest('1'), size: 1 }] }), undefined), /which a node cannot unpack/);
    assert.throws(() => parsePullable(image({ layers: [{ mediaType: MEDIA.ociLayer, digest: 'md5:x', size: 1 }] }), undefined), /not a sha256 digest/);
    assert.throws(() => parsePullable(Buffer.from('nope'), undefined), /not valid JSON/);
  });

  it('an index: this node takes linux and its architecture, never an attestation, and says what there is', () => {
    const entry = (architecture: string, extra: Record<string, unknown> = {}, os = 'linux'): Descriptor => ({
      mediaType: MEDIA.ociManifest,
      digest: digest(String(architecture.length % 10)),
      size: 1,
      platform: { os, architecture, ...extra },
    });
    const amd64 = entry('amd64');
    const arm64 = entry('arm64', { variant: 'v8' });
    const armv7 = entry('arm', { variant: 'v7' });
    const attestation = entry('unknown', {}, 'unknown');
    const list = [attestation, armv7, arm64, amd64];
    assert.equal(choosePlatform(list, { os: 'linux', architecture: 'amd64' }), amd64);
    assert.equal(choosePlatform(list, { os: 'linux', architecture: 'arm64' }), arm64);
    assert.equal(choosePlatform(list, { os: 'linux', architecture: 'arm', variant: 'v7' }), armv7);
    assert.throws(() => choosePlatform([attestation, armv7], { os: 'linux', architecture: 'amd64' }), /no manifest for linux\/amd64 in the image index \(it has: unknown\/unknown, linux\/arm\/v7\)/);
  });
});
