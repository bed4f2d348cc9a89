import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { defaultPodSpec } from '../../src/apiserver/kinds/pods.js';
import { defaultPullPolicy, manifestReference } from '../../src/images/registry/reference.js';
import { parseImageRef } from '../../src/images/reference.js';
import {
  endpointsFor,
  expandTemplate,
  hostConfig,
  loadRegistries,
  parseEndpoint,
  parseRegistries,
  RegistriesError,
  rewriteRepository,
} from '../../src/images/registry/registries.js';

/** What a pull asks for, the default pull policy, registries.yaml in K3s's format, and where a pull looks: pure parsing and resolution. */

const DIGEST = `sha256:${'a'.repeat(64)}`;

describe('image references for a pull', () => {
  it('what a pull asks for: the digest when pinned, else the tag, else latest', () => {
    assert.equal(manifestReference(parseImageRef('a')), 'latest');
    assert.equal(manifestReference(parseImageRef('a:3')), '3');
    assert.equal(manifestReference(parseImageRef(`a:3@${DIGEST}`)), DIGEST);
  });

  it("Kubernetes' default pull policy: Always for latest or no tag, IfNotPresent for a tag or a digest", () => {
    assert.equal(defaultPullPolicy('busybox'), 'Always');
    assert.equal(defaultPullPolicy('busybox:latest'), 'Always');
    assert.equal(defaultPullPolicy('registry.local:5000/app'), 'Always');
    assert.equal(defaultPullPolicy('busybox:1.36'), 'IfNotPresent');
    assert.equal(defaultPullPolicy(`busybox@${DIGEST}`), 'IfNotPresent');
    assert.equal(defaultPullPolicy(`busybox:latest@${DIGEST}`), 'Always');
  });

  it('the API server fills it in that way when a container leaves it out, and keeps one given', () => {
    const spec = {
      containers: [
        { name: 'a', image: 'busybox' },
        { name: 'b', image: 'busybox:1.36' },
        { name: 'c', image: 'busybox', imagePullPolicy: 'Never' },
      ],
      initContainers: [{ name: 'i', image: 'registry.local:5000/init:latest' }],
    };
    defaultPodSpec(spec);
    assert.deepEqual(
      [...spec.containers, ...spec.initContainers].map((c) => (c as { imagePullPolicy?: string }).imagePullPolicy),
      ['Always', 'IfNotPresent', 'Never', 'Always'],
    );
  });
});

const EXAMPLE = `# a node's registries
mirrors:
  docker.io:
    endpoint:
      - "https://mirror.example.com:5000"
      - "http://10.0.0.5:5000/cache"
    rewrite:
      "^rancher/(.*)": "mirrorproject/rancher-images/$1"
  "*":
    endpoint: ["fallback.example.com"]
  registry.example.com:
configs:
  "mirror.example.com:5000":
    auth:
      username: ann
      password: s3cret
    tls:
      insecure_skip_verify: true
  "*":
    auth:
      auth: ${Buffer.from('bob:pw').toString('base64')}
  docker.io:
`;

describe('registries.yaml', () => {
  it("reads K3s's format: mirrors with endpoints and rewrites, configs with auth and tls", () => {
    const config = parseRegistries(EXAMPLE, '/etc/drover/registries.yaml');
    const hub = config.mirrors.get('docker.io')!;
    assert.deepEqual(hub.endpoints.map((u) => u.href), ['https://mirror.example.com:5000/v2', 'http://10.0.0.5:5000/cache/v2']);
    assert.deepEqual(hub.rewrites.map((r) => [r.source, r.replacement]), [['^rancher/(.*)', 'mirrorproject/rancher-images/$1']]);
    assert.deepEqual(config.mirrors.get('*')!.endpoints.map((u) => u.href), ['https://fallback.example.com/v2']);
    // A key with no value opts that host out of "*".
    assert.equal(config.mirrors.get('registry.example.com'), null);
    assert.deepEqual(config.configs.get('mirror.example.com:5000'), {
      auth: { username: 'ann', password: 's3cret' },
      tls: { insecureSkipVerify: true },
    });
    assert.deepEqual(config.warnings, []);
  });

  it('an endpoint: https by default, the API root ends in /v2 (added unless there)', () => {
    assert.equal(parseEndpoint('mirror.local').href, 'https://mirror.local/v2');
    assert.equal(parseEndpoint('https://mirror.local:5000/').href, 'https://mirror.local:5000/v2');
    assert.equal(parseEndpoint('http://mirror.local/v2').href, 'http://mirror.local/v2');
    assert.equal(parseEndpoint('https://harbor.local/prefix/v2/').href, 'https://harbor.local/prefix/v2');
    assert.throws(() => parseEndpoint('ftp://x'), /only https:\/\/ and http:\/\//);
    assert.throws(() => parseEndpoint('https://u:p@x'), /credentials belong in configs/);
  });

  it('a malformed file is an error naming the file and the line of each problem', () => {
    const cases: [string, RegExp][] = [
      ['mirrors:\n  docker.io:\n    endpoint: "https://x"\n', /^f\.yaml:3: mirrors\."docker\.io"\.endpoint must be a list of URLs$/],
      ['mirrors:\n  docker.io:\n    endpoint:\n      - "ftp://x"\n', /^f\.yaml:4: .*only https:\/\/ and http:\/\//],
      ['mirrors:\n  docker.io:\n    rewrite:\n      "^(unclosed": "x"\n', /^f\.yaml:4: .*is not a regular expression/],
      ['configs:\n  h:\n    tls:\n      insecure_skip_verify: maybe\n', /^f\.yaml:4: configs\."h"\.tls\.insecure_skip_verify must be true or false$/],
      ['configs:\n  h:\n    tls:\n      cert_file: /c\n', /^f\.yaml:3: configs\."h"\.tls needs both cert_file and key_file/],
      ['configs:\n  h:\n    auth:\n      auth: "not base64!"\n', /^f\.yaml:3: configs\."h"\.auth\.auth must be base64/],
      ['configs:\n  h:\n    auth: [1, 2]\n', /^f\.yaml:3: configs\."h"\.auth must be a map$/],
      ['mirrors: [a]\n', /^f\.yaml:1: mirrors must be a map$/],
      ['mirrors:\n  docker.io: {}\n  docker.io: {}\n', /^f\.yaml:3:\d+: duplicate key/],
      ['mirrors:\n  docker.io:\n    endpoint: [\n', /^f\.yaml:\d+:\d+: YAML syntax error/],
      ['- a\n', /^f\.yaml:1: registries\.yaml \(its top level\) must be a map$/],
      ['mirrors:\n  "bad host/x": {}\n', /^f\.yaml:2: mirrors: "bad host\/x" is not a registry host/],
      // RE2's inline flags are not JavaScript's: refused at start rather than silently never matching.
      ['mirrors:\n  docker.io:\n    rewrite:\n      "(?i)^Library/(.*)": "x/$1"\n', /^f\.yaml:4: .*is not a regular expression/],
    ];
    for (const [text, expected] of cases) {
      assert.throws(
        () => parseRegistries(text, 'f.yaml'),
        (e: unknown) => e instanceof RegistriesError && e.problems.some((p) => expected.test(p)),
        `${JSON.stringify(text)} → ${expected}`,
      );
    }
  });

  it('unknown keys are warned about with their line, not refused (K3s ignores them too)', () => {
    const config = parseRegistries('mirrors:\n  docker.io:\n    endpoints: ["x"]\nextra: 1\n', 'f.yaml');
    assert.deepEqual([...config.warnings].sort(), ['f.yaml:3: unknown key "endpoints" in mirrors."docker.io" (ignored)', 'f.yaml:4: unknown key "extra" (ignored)']);
  });

  it('an empty file is no configuration', () => {
    const config = parseRegistries('', 'f.yaml');
    assert.equal(config.mirrors.size, 0);
    assert.equal(config.configs.size, 0);
  });

  it('loading: a missing file is no mirrors; TLS files are read, one that is missing is an error naming it; readable credentials are warned about', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'drover-registries-'));
    try {
      assert.equal(loadRegistries(path.join(dir, 'none.yaml')).mirrors.size, 0);
      fs.writeFileSync(path.join(dir, 'ca.pem'), 'CA PEM');
      const file = path.join(dir, 'registries.yaml');
      fs.writeFileSync(file, `configs:\n  h:\n    tls:\n      ca_file: ${dir}/ca.pem\n`);
      assert.equal(loadRegistries(file).configs.get('h')?.tls?.ca, 'CA PEM');
      // Credentials in a file every user may read: loaded, with a warning saying so.
      fs.writeFileSync(file, 'configs:\n  h:\n    auth: {username: u, password: p}\n', { mode: 0o644 });
      fs.chmodSync(file, 0o644);
      assert.deepEqual(loadRegistries(file).warnings, [`${file} holds registry credentials and every local user can read it (chmod 600 it)`]);
      fs.chmodSync(file, 0o600);
      assert.deepEqual(loadRegistries(file).warnings, []);
      fs.writeFileSync(file, `configs:\n  h:\n    tls:\n      ca_file: ${dir}/missing.pem\n`);
      assert.throws(() => loadRegistries(file), (e: unknown) => e instanceof RegistriesError && e.message.includes(`${file}: configs."h".tls.ca_file "${dir}/missing.pem": ENOENT`));
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('where a pull looks', () => {
  const config = parseRegistries(EXAMPLE, 'f.yaml');

  it("the image registry's mirrors in order with rewrites, then its own endpoint with the original name", () => {
    const endpoints = endpointsFor(config, parseImageRef('rancher/coredns:1.6'));
    assert.deepEqual(
      endpoints.map((e) => [e.url.href, e.repository, e.mirror]),
      [
        ['https://mirror.example.com:5000/v2', 'mirrorproject/rancher-images/coredns', true],
        ['http://10.0.0.5:5000/cache/v2', 'mirrorproject/rancher-images/coredns', true],
        ['https://registry-1.docker.io/v2', 'rancher/coredns', false],
      ],
    );
    // The config of the host contacted; the default endpoint of docker.io opted out of "*".
    assert.deepEqual(endpoints[0]!.config?.auth, { username: 'ann', password: 's3cret' });
    assert.deepEqual(endpoints[1]!.config?.auth, { auth: Buffer.from('bob:pw').toString('base64') });
    assert.equal(endpoints[2]!.config, undefined);
  });

  it('a repository no rewrite matches keeps its name', () => {
    assert.equal(endpointsFor(config, parseImageRef('library/nginx'))[0]!.repository, 'library/nginx');
  });

  it('"*" stands for a registry without its own entry; an entry with no value opts out', () => {
    assert.deepEqual(endpointsFor(config, parseImageRef('quay.io/x/y')).map((e) => e.url.href), ['https://fallback.example.com/v2', 'https://quay.io/v2']);
    assert.deepEqual(endpointsFor(config, parseImageRef('registry.example.com/x')).map((e) => e.url.href), ['https://registry.example.com/v2']);
  });

  it('a mirror endpoint equal to the default one is tried once, last', () => {
    const own = parseRegistries('mirrors:\n  r.local:\n    endpoint: ["https://r.local", "https://m.local"]\n', 'f.yaml');
    assert.deepEqual(endpointsFor(own, parseImageRef('r.local/a')).map((e) => e.url.href), ['https://m.local/v2', 'https://r.local/v2']);
  });

  it('no file: only the registry itself', () => {
    const none = parseRegistries('', 'f.yaml');
    assert.deepEqual(endpointsFor(none, parseImageRef('busybox')).map((e) => [e.url.href, e.repository]), [['https://registry-1.docker.io/v2', 'library/busybox']]);
    assert.equal(hostConfig(none, 'x'), undefined);
  });

  it("rewrites: Go's template ($1, ${1}, named groups, $$), the first matching rule, every match replaced", () => {
    const rules = parseRegistries(
      'mirrors:\n  docker.io:\n    rewrite:\n      "^library/(?P<img>.*)": "hub/${img}-$$"\n      "^(.*)$": "all/${1}"\n      "o": "0"\n',
      'f.yaml',
    ).mirrors.get('docker.io')!.rewrites;
    assert.equal(rewriteRepository(rules, 'library/nginx'), 'hub/nginx-$');
    assert.equal(rewriteRepository(rules, 'team/app'), 'all/team/app');
    assert.equal(rewriteRepository(rules.slice(2), 'foo/boo'), 'f00/b00');
    const m = /(a)(b)?/.exec('a')!;
    // `$1x` is the group named "1x" (none), as in Go; `${1}x` is group 1 then x.
    assert.equal(expandTemplate('$1-$2-$9-$1x-${1}x', m), 'a----ax');
  });
});
