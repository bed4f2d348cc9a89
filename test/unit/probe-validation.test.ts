import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { defaultPodSpec, validatePod } from '../../src/apiserver/kinds/pods.js';

/** kube-apiserver's defaults and rules for liveness, readiness and startup probes, with its wording. */

function problems(container: Record<string, unknown>, extra: Record<string, unknown> = {}): string[] {
  const spec = { containers: [{ name: 'c', command: ['true'], ...container }], ...extra };
  defaultPodSpec(spec);
  return validatePod({ metadata: { name: 'p' }, spec }).map((c) => `${c.field}: ${c.message}`);
}

describe('probe defaults and validation', () => {
  it('fills in the defaults kube-apiserver fills in', () => {
    const spec = { containers: [{ name: 'c', command: ['true'], livenessProbe: { httpGet: { port: 80 } }, readinessProbe: { tcpSocket: { port: 'http' }, periodSeconds: 2 } }] };
    defaultPodSpec(spec);
    assert.deepEqual(spec.containers[0]!.livenessProbe, {
      httpGet: { port: 80, path: '/', scheme: 'HTTP' },
      timeoutSeconds: 1,
      periodSeconds: 10,
      successThreshold: 1,
      failureThreshold: 3,
    });
    assert.equal((spec.containers[0]!.readinessProbe as { periodSeconds: number }).periodSeconds, 2);
  });

  it('well-formed probes of every kind pass', () => {
    assert.deepEqual(
      problems({
        ports: [{ name: 'http', containerPort: 8080 }],
        livenessProbe: { httpGet: { port: 'http', path: '/healthz', scheme: 'HTTPS', httpHeaders: [{ name: 'X-Probe', value: '1' }] }, terminationGracePeriodSeconds: 5 },
        readinessProbe: { tcpSocket: { port: 8080 }, successThreshold: 3, initialDelaySeconds: 2 },
        startupProbe: { exec: { command: ['cat', '/tmp/ready'] }, failureThreshold: 30 },
      }),
      [],
    );
    assert.deepEqual(problems({ livenessProbe: { grpc: { port: 9000, service: 'x' } } }), []);
  });

  it('refuses what kube-apiserver refuses, naming the field', () => {
    assert.deepEqual(
      problems({
        livenessProbe: { successThreshold: 2 },
        readinessProbe: { exec: { command: ['true'] }, tcpSocket: { port: 1 }, terminationGracePeriodSeconds: 3, periodSeconds: -1 },
        startupProbe: { httpGet: { port: 70000, scheme: 'FTP', httpHeaders: [{ name: 'Bad Header', value: 'x' }] }, terminationGracePeriodSeconds: 0 },
      }),
      [
        'spec.containers[0].livenessProbe: Required value: must specify a handler type',
        'spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1',
        'spec.containers[0].readinessProbe.tcpSocket: Forbidden: may not specify more than 1 handler type',
        'spec.containers[0].readinessProbe.periodSeconds: Invalid value: -1: must be greater than or equal to 0',
        'spec.containers[0].readinessProbe.terminationGracePeriodSeconds: Invalid value: 3: must not be set for readinessProbes',
        'spec.containers[0].startupProbe.httpGet.port: Invalid value: 70000: must be between 1 and 65535, inclusive',
        'spec.containers[0].startupProbe.httpGet.scheme: Unsupported value: "FTP": supported values: "HTTP", "HTTPS"',
        `spec.containers[0].startupProbe.httpGet.httpHeaders: Invalid value: "Bad Header": a valid HTTP header must consist of alphanumeric characters or '-' (e.g. 'X-Header-Name',  regex used for validation is '[-A-Za-z0-9]+')`,
        'spec.containers[0].startupProbe.terminationGracePeriodSeconds: Invalid value: 0: must be greater than 0',
      ],
    );
    assert.deepEqual(problems({ livenessProbe: { tcpSocket: { port: 'Not_A_Name' } } }), [
      'spec.containers[0].livenessProbe.tcpSocket.port: Invalid value: "Not_A_Name": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)',
    ]);
    assert.deepEqual(problems({ livenessProbe: { exec: {} } }), ['spec.containers[0].livenessProbe.exec.command: Required value']);
  });

  it('init containers may have probes only as sidecars (restartPolicy: Always)', () => {
    const init = (fields: Record<string, unknown>) => problems({}, { initContainers: [{ name: 'i', command: ['true'], readinessProbe: { tcpSocket: { port: 1 } }, ...fields }] });
    assert.deepEqual(init({}), ['spec.initContainers[0].readinessProbe: Forbidden: may not be set for init containers without restartPolicy=Always']);
    assert.deepEqual(init({ restartPolicy: 'Always' }), []);
  });
});
