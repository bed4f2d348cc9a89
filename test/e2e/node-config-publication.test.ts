import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { checkPublishedValues, computeDrift, escapeForTerminal, formatDrift, publication } from '../../src/config/drift.js';
import { joinSecret, runDrover } from '../helpers/agent.js';
import { cleanup, request, type ServerProcess, startServer } from '../helpers/server.js';

/**
 * A node publishes its own configuration for `drover config drift`. What it sends is checked
 * against the schema on the way in, and the drift table escapes what it prints, so a node can
 * neither invent settings nor paint the admin's terminal.
 */

const ESC = '\u001b';

describe('published node configuration: checked in, escaped out (pure)', () => {
  it('accepts what a real agent publishes', () => {
    const { values, problems } = checkPublishedValues({
      'supervisor-metrics': 'true',
      'node-name': 'edge-1',
      'agent-port': '10250',
      token: '[redacted]',
      'node-label': '[]',
      'node-ip': '(unset)',
    });
    assert.deepEqual(problems, []);
    assert.equal(Object.keys(values).length, 6);
  });

  it('refuses unknown keys, server-only keys, wrong types, non-canonical text, secrets in clear and control characters', () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ 'no-such-setting': 'x' }, /no-such-setting: not a setting of drover agent/],
      [{ 'cluster-init': 'true' }, /cluster-init: not a setting of drover agent/],
      [{ 'supervisor-metrics': 'maybe' }, /supervisor-metrics: expected true or false/],
      [{ 'supervisor-metrics': 'yes' }, /not how drover prints a bool \(expected "true"\)/],
      [{ 'agent-port': 70000 }, /agent-port: expected printable text/],
      [{ token: 'K10secret' }, /token: a secret setting is published only as \[redacted\]/],
      [{ 'node-name': `edge${ESC}[2J${ESC}[31mFAKE` }, /node-name: expected printable text/],
      [{ 'node-name': 'a\u202ebad' }, /node-name: expected printable text/],
      [{ 'node-name': 'x'.repeat(5000) }, /node-name: expected printable text of at most 4096/],
    ];
    for (const [input, message] of cases) {
      const { values, problems } = checkPublishedValues(input);
      assert.deepEqual(values, {}, JSON.stringify(input).slice(0, 80));
      assert.match(problems.join('\n'), message);
    }
  });

  it('the drift table escapes control characters even in values stored before the check', () => {
    const forged = publication('n1', 'agent', { 'node-name': `n1${ESC}]0;pwned\u0007${ESC}[2J` });
    const honest = publication('n2', 'agent', { 'node-name': 'n2' });
    const text = formatDrift(computeDrift([forged, honest], undefined));
    assert.ok(!text.includes(ESC) && !text.includes('\u0007'), JSON.stringify(text));
    assert.match(text, /n1\\u001b\]0;pwned\\u0007\\u001b\[2J/);
    assert.equal(escapeForTerminal('plain text'), 'plain text');
  });
});

describe('published node configuration on a real server', () => {
  let server: ServerProcess;
  let nodeToken: string;

  before(async () => {
    server = await startServer();
    const registration = await request(server, 'POST', '/drover/v1/register', {
      token: joinSecret(server),
      body: { nodeName: 'painter', nodeId: randomUUID(), password: 'painter-password-0123456789' },
    });
    assert.equal(registration.status, 200, registration.text);
    nodeToken = (registration.json as { token: string }).token;
  });

  after(async () => {
    await cleanup();
  });

  it('a node publishing escape sequences or invented settings gets 400 and drift shows nothing of it', async () => {
    for (const values of [
      { 'node-name': `painter${ESC}[2J${ESC}[1;1HNO DRIFT` },
      { 'cluster-cidr': '10.0.0.0/8' },
      { 'supervisor-metrics': 'definitely' },
    ]) {
      const res = await request(server, 'PUT', '/drover/v1/node-config', { token: nodeToken, body: { values } });
      assert.equal(res.status, 400, res.text);
      assert.match((res.json as { message: string }).message, /node config of painter refused/);
    }
    const good = await request(server, 'PUT', '/drover/v1/node-config', {
      token: nodeToken,
      body: { values: { 'node-name': 'painter', 'supervisor-metrics': 'true' } },
    });
    assert.equal(good.status, 200, good.text);
    const drift = await runDrover(['config', 'drift', '--kubeconfig', server.kubeconfig]);
    assert.ok(!drift.stdout.includes(ESC), JSON.stringify(drift.stdout));
    assert.doesNotMatch(drift.stdout, /NO DRIFT|cluster-cidr/);
  });
});
