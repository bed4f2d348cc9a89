import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ImageRefError, isLatestTag, normalizeImageRef, parseImageRef } from '../../src/images/reference.js';

const DIGEST = `sha256:${'ab'.repeat(32)}`;

describe('image references are normalized as containerd and the kubelet do', () => {
  const cases: [string, string][] = [
    ['busybox', 'docker.io/library/busybox:latest'],
    ['busybox:1.36', 'docker.io/library/busybox:1.36'],
    ['library/busybox', 'docker.io/library/busybox:latest'],
    ['docker.io/busybox', 'docker.io/library/busybox:latest'],
    ['index.docker.io/busybox:1', 'docker.io/library/busybox:1'],
    ['docker.io/library/busybox:latest', 'docker.io/library/busybox:latest'],
    ['team/app', 'docker.io/team/app:latest'],
    ['team/sub/app:v2', 'docker.io/team/sub/app:v2'],
    ['localhost/app', 'localhost/app:latest'],
    ['localhost:5000/app', 'localhost:5000/app:latest'],
    ['127.0.0.1:5000/team/app:1.0', '127.0.0.1:5000/team/app:1.0'],
    ['[::1]:5000/app:dev', '[::1]:5000/app:dev'],
    ['registry.example.com/a/b/c:tag_1.x-y', 'registry.example.com/a/b/c:tag_1.x-y'],
    ['quay.io/a.b/c__d/e-f--g', 'quay.io/a.b/c__d/e-f--g:latest'],
    [`busybox@${DIGEST}`, `docker.io/library/busybox@${DIGEST}`],
    [`busybox:1.36@${DIGEST}`, `docker.io/library/busybox:1.36@${DIGEST}`],
    [`localhost:5000/app@${DIGEST}`, `localhost:5000/app@${DIGEST}`],
    // An uppercase first component can only be a host.
    ['Registry/app', 'Registry/app:latest'],
  ];
  for (const [input, expected] of cases) {
    it(`${input} → ${expected}`, () => assert.equal(normalizeImageRef(input), expected));
  }

  it('normalizing twice changes nothing', () => {
    for (const [, expected] of cases) assert.equal(normalizeImageRef(expected), expected);
  });

  it('splits a reference into its parts (a port is part of the host, not a tag)', () => {
    assert.deepEqual(parseImageRef('localhost:5000/team/app:7'), {
      domain: 'localhost:5000',
      path: 'team/app',
      name: 'localhost:5000/team/app',
      tag: '7',
      ref: 'localhost:5000/team/app:7',
    });
    const pinned = parseImageRef(`app@${DIGEST}`);
    assert.equal(pinned.tag, undefined, 'a digest implies no tag');
    assert.equal(pinned.digest, DIGEST);
  });

  it('knows the latest tag, given or implied, as the pull policy default needs', () => {
    assert.equal(isLatestTag('busybox'), true);
    assert.equal(isLatestTag('busybox:latest'), true);
    assert.equal(isLatestTag('busybox:1.36'), false);
    assert.equal(isLatestTag(`busybox@${DIGEST}`), false);
  });

  const bad: [string, RegExp][] = [
    ['', /empty/],
    [' busybox', /whitespace/],
    ['busy box', /whitespace/],
    ['Busybox', /must be lowercase/],
    ['docker.io/Team/app', /must be lowercase/],
    ['busybox:', /tag "" is not valid/],
    ['busybox:-x', /tag "-x" is not valid/],
    [`busybox:${'x'.repeat(129)}`, /tag .* is not valid/],
    ['team//app', /"" is not a valid repository path component/],
    ['team/app_', /not a valid repository path component/],
    ['busybox@sha256:abc', /64 lowercase hex/],
    [`busybox@sha512:${'a'.repeat(128)}`, /sha512 is not supported/],
    ['busybox@latest', /not a digest/],
    ['bad_host:5000/app', /not a valid registry host/],
    [`${'a'.repeat(250)}/app`, /longer than 255/],
    [':tag', /no repository name/],
  ];
  for (const [input, message] of bad) {
    it(`refuses ${JSON.stringify(input.length > 40 ? `${input.slice(0, 40)}…` : input)} with a clear message`, () => {
      assert.throws(() => normalizeImageRef(input), (error: unknown) => error instanceof ImageRefError && message.test(error.message));
    });
  }
});
