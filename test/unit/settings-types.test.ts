import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import { resolveConfig } from '../../src/config/resolve.js';
import { type AgentSettings, fieldName, labelRecord, type ServerSettings, SETTINGS, settingsFor } from '../../src/config/schema.js';
import { deriveTimings } from '../../src/config/timings.js';

/**
 * The typed settings derived from the schema table (src/config/schema.ts): `ResolvedConfig.values`
 * has one field per setting of its command, named by `fieldName`, holding the resolved value.
 * The field lists below are checked by the compiler against the derived types (a missing or extra
 * field does not compile), and by the test against what the resolver builds at run time, so the
 * type and the runtime rule cannot part.
 */

const SERVER_FIELDS: Record<keyof ServerSettings, true> = {
  clusterName: true,
  nodeLeaseRenewIntervalMs: true,
  nodeMonitorGracePeriodMs: true,
  fencingTimeoutMs: true,
  defaultUnavailableTolerationMs: true,
  defaultRuntimeClass: true,
  secretsEncryption: true,
  serviceAccountIssuer: true,
  clusterCidr: true,
  serviceCidr: true,
  serviceNodePortRange: true,
  clusterDns: true,
  clusterDomain: true,
  flannelBackend: true,
  httpsListenPort: true,
  bindAddress: true,
  tlsSans: true,
  watchBookmarkIntervalMs: true,
  writeKubeconfig: true,
  disableAgent: true,
  httpsHeaderTimeoutMs: true,
  httpsRequestTimeoutMs: true,
  httpsIdleTimeoutMs: true,
  maxWatchesPerUser: true,
  maxWatches: true,
  maxRequestsInflight: true,
  server: true,
  role: true,
  clusterInit: true,
  etcdClientPort: true,
  etcdPeerPort: true,
  etcdLearnerTimeoutMs: true,
  token: true,
  tokenFile: true,
  datastoreEndpoint: true,
  datastoreCafile: true,
  datastoreCertfile: true,
  datastoreKeyfile: true,
  dataDir: true,
  nodeName: true,
  nodeLabels: true,
  nodeTaints: true,
  nodeIp: true,
  agentPort: true,
  privateRegistry: true,
  shutdownGracePeriodMs: true,
  supervisorMetrics: true,
  embeddedRegistry: true,
  imageGcHighThreshold: true,
  imageGcLowThreshold: true,
  systemReserved: true,
  logLevel: true,
};

const AGENT_FIELDS: Record<keyof AgentSettings, true> = {
  server: true,
  token: true,
  tokenFile: true,
  dataDir: true,
  nodeName: true,
  nodeLabels: true,
  nodeTaints: true,
  nodeIp: true,
  agentPort: true,
  privateRegistry: true,
  shutdownGracePeriodMs: true,
  supervisorMetrics: true,
  embeddedRegistry: true,
  imageGcHighThreshold: true,
  imageGcLowThreshold: true,
  systemReserved: true,
  logLevel: true,
};

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'drover-settings-types-'));
after(() => fs.rmSync(dir, { recursive: true, force: true }));

/** Resolved from flags only: an empty config file, no environment. */
function resolve<C extends 'server' | 'agent'>(command: C, flags: Record<string, string | string[]>) {
  const configFile = path.join(dir, 'empty.yaml');
  fs.writeFileSync(configFile, '');
  return resolveConfig({ command, flags, env: {}, configFlag: configFile });
}

describe('typed settings', () => {
  it('field names: camelCase, durations in Ms, lists plural', () => {
    assert.equal(fieldName({ name: 'node-lease-renew-interval', type: 'duration' }), 'nodeLeaseRenewIntervalMs');
    assert.equal(fieldName({ name: 'tls-san', type: 'list' }), 'tlsSans');
    assert.equal(fieldName({ name: 'node-label', type: 'labels' }), 'nodeLabels');
    assert.equal(fieldName({ name: 'node-taint', type: 'taints' }), 'nodeTaints');
    assert.equal(fieldName({ name: 'etcd-client-port', type: 'port' }), 'etcdClientPort');
    assert.equal(fieldName({ name: 'server', type: 'string' }), 'server');
    const names = SETTINGS.map(fieldName);
    assert.equal(new Set(names).size, names.length, 'no two settings share a field');
  });

  it('a server config has exactly the fields of ServerSettings, one per server setting', () => {
    const config = resolve('server', {});
    assert.deepEqual(Object.keys(config.values).sort(), Object.keys(SERVER_FIELDS).sort());
    assert.equal(settingsFor('server').length, Object.keys(SERVER_FIELDS).length);
  });

  it('an agent config has exactly the fields of AgentSettings', () => {
    const config = resolve('agent', { server: 'https://127.0.0.1:6443', token: 'K10abc::server:secret' });
    assert.deepEqual(Object.keys(config.values).sort(), Object.keys(AGENT_FIELDS).sort());
    assert.equal(settingsFor('agent').length, Object.keys(AGENT_FIELDS).length);
  });

  it('each field holds the resolved value, typed', () => {
    const config = resolve('server', {
      'node-monitor-grace-period': '6s',
      'tls-san': ['a.example', 'b.example'],
      'node-label': ['zone=a', 'tier=web'],
      'node-taint': ['dedicated=db:NoSchedule'],
      role: 'all',
      'https-listen-port': '0',
    });
    const settings: ServerSettings = config.values;
    assert.equal(settings.nodeMonitorGracePeriodMs, 6000);
    assert.equal(settings.nodeLeaseRenewIntervalMs, 1000);
    assert.deepEqual(settings.tlsSans, ['a.example', 'b.example']);
    assert.deepEqual(labelRecord(settings.nodeLabels), { zone: 'a', tier: 'web' });
    assert.deepEqual(settings.nodeTaints, [{ key: 'dedicated', value: 'db', effect: 'NoSchedule' }]);
    assert.equal(settings.httpsListenPort, 0);
    assert.equal(settings.writeKubeconfig, undefined);
    assert.equal(settings.role, 'all');
    assert.equal(settings.clusterName, 'drover');
    // get() by key returns the same, typed.
    assert.equal(config.get('node-monitor-grace-period'), settings.nodeMonitorGracePeriodMs);
    for (const setting of settingsFor('server')) {
      assert.deepEqual((settings as unknown as Record<string, unknown>)[fieldName(setting)], config.rawValue(setting.name), setting.name);
    }
  });

  it('the server settings are what deriveTimings takes', () => {
    const derived = deriveTimings(resolve('server', {}).values);
    assert.equal(derived.fencingTimeoutMs, 3000);
    assert.equal(derived.peerCutOffMs, 2000);
  });
});

describe('service-account-issuer', () => {
  it('defaults to K3s’s issuer, takes another https URL, and refuses anything else before the server starts', () => {
    assert.equal(resolve('server', {}).values.serviceAccountIssuer, 'https://kubernetes.default.svc.cluster.local');
    assert.equal(resolve('server', { 'service-account-issuer': 'https://issuer.example/cluster-a' }).values.serviceAccountIssuer, 'https://issuer.example/cluster-a');
    for (const [value, why] of [
      ['kubernetes/serviceaccount', /is not a URL/],
      ['http://issuer.example', /must be an https URL/],
      ['https://issuer.example/?a=b', /may not have a query or a fragment/],
    ] as const) {
      assert.throws(() => resolve('server', { 'service-account-issuer': value }), (error: Error & { problems?: string[] }) => {
        assert.match(error.problems?.join('\n') ?? error.message, new RegExp(`service-account-issuer \\(flag:--service-account-issuer\\): .*${why.source}`));
        return true;
      });
    }
  });
});

describe('image-gc-high-threshold and image-gc-low-threshold', () => {
  const agentFlags = { server: 'https://127.0.0.1:6443', token: 'K10::server:abc' };
  it('default to the kubelet’s 85 and 80, take whole percentages, and reach the agent’s options', () => {
    const defaults = resolve('agent', agentFlags).values;
    assert.deepEqual([defaults.imageGcHighThreshold, defaults.imageGcLowThreshold], [85, 80]);
    const set = resolve('server', { 'image-gc-high-threshold': '100', 'image-gc-low-threshold': '0%' }).values;
    assert.deepEqual([set.imageGcHighThreshold, set.imageGcLowThreshold], [100, 0]);
  });

  it('refuses what is not a percentage, and a low threshold not below the high one', () => {
    for (const value of ['101', '-1', '50.5', 'half']) {
      assert.throws(() => resolve('agent', { ...agentFlags, 'image-gc-high-threshold': value }), (error: Error & { problems?: string[] }) => {
        assert.match(error.problems?.join('\n') ?? '', /--image-gc-high-threshold: expected a whole percentage \(0-100\)/);
        return true;
      });
    }
    assert.throws(() => resolve('server', { 'image-gc-high-threshold': '70', 'image-gc-low-threshold': '70' }), (error: Error & { problems?: string[] }) => {
      assert.match(
        error.problems?.join('\n') ?? '',
        /image-gc-low-threshold 70 \(flag:--image-gc-low-threshold\) must be below image-gc-high-threshold 70 \(flag:--image-gc-high-threshold\)/,
      );
      return true;
    });
  });
});
