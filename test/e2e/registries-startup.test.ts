import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { runDrover } from '../helpers/agent.js';
import { cleanup, serverArgs, tempDir } from '../helpers/server.js';

/**
 * The node's `private-registry` file at start: a malformed registries.yaml stops `drover agent`
 * and `drover server` with exit code 78 and a message naming the file and the line, before
 * anything is written; a missing file is no mirrors (every other test starts that way).
 */

const EXIT_CONFIG = 78;

describe('registries.yaml at start', () => {
  const dir = tempDir('registries-startup');
  after(() => cleanup(dir));

  const bad = path.join(dir, 'registries.yaml');
  fs.writeFileSync(bad, 'mirrors:\n  docker.io:\n    endpoint: "https://mirror.example.com"\nconfigs:\n  h:\n    tls:\n      insecure_skip_verify: maybe\n');

  it('drover agent: exit 78 naming the file and each line', async () => {
    const dataDir = path.join(dir, 'agent');
    const result = await runDrover(['agent', '--server', 'https://127.0.0.1:1', '--token', 'x', '--data-dir', dataDir, '--private-registry', bad]);
    assert.equal(result.code, EXIT_CONFIG, result.stderr);
    assert.match(result.stderr, /invalid configuration/);
    assert.match(result.stderr, new RegExp(`private-registry \\(flag:--private-registry\\): ${bad}:3: mirrors\\."docker\\.io"\\.endpoint must be a list of URLs`));
    assert.match(result.stderr, new RegExp(`${bad}:7: configs\\."h"\\.tls\\.insecure_skip_verify must be true or false`));
    assert.equal(fs.existsSync(dataDir), false, 'nothing written');
  });

  it('drover server (its own agent uses the file): exit 78, nothing written', async () => {
    const dataDir = path.join(dir, 'server');
    const result = await runDrover([...serverArgs(dataDir, { embeddedAgent: true }), '--private-registry', bad]);
    assert.equal(result.code, EXIT_CONFIG, result.stderr);
    assert.match(result.stderr, new RegExp(`${bad}:3: mirrors`));
    assert.equal(fs.existsSync(dataDir), false, 'nothing written');
  });

  it('a TLS file it names that cannot be read is refused too', async () => {
    const file = path.join(dir, 'tls.yaml');
    fs.writeFileSync(file, `configs:\n  "r.local":\n    tls:\n      ca_file: ${dir}/no-such-ca.pem\n`);
    const result = await runDrover(['agent', '--server', 'https://127.0.0.1:1', '--token', 'x', '--data-dir', path.join(dir, 'a2'), '--private-registry', file]);
    assert.equal(result.code, EXIT_CONFIG, result.stderr);
    assert.match(result.stderr, new RegExp(`${file}: configs\\."r\\.local"\\.tls\\.ca_file "${dir}/no-such-ca\\.pem": ENOENT`));
  });
});
