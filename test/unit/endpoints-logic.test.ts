/**
 * The endpoints controller's pure logic (src/controllers/endpoints-logic.ts): pods → a Service's
 * Endpoints and EndpointSlices, without a server. Ready pods are addresses, not-ready ones
 * notReadyAddresses / conditions.ready=false, pods on a lost node not ready, named target ports
 * resolved per pod, pods without an address (no pod network yet) left out while the objects are
 * still made, selector-less Services left to the user.
 *
 * Run: node --import tsx --test test/unit/endpoints-logic.test.ts
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import type { KubeObject } from '../../src/apiserver/objects.js';
import { validateEndpoints, validateEndpointSlice } from '../../src/apiserver/kinds/endpoints.js';
import { desiredEndpoints, MANAGED_BY_LABEL, SERVICE_NAME_LABEL } from '../../src/controllers/endpoints-logic.js';

const service = (spec: Record<string, unknown>): KubeObject => ({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'web', namespace: 'default', uid: 'svc-uid' }, spec });

function pod(name: string, options: { ip?: string; ready?: boolean; node?: string; labels?: Record<string, string>; port?: number; deleting?: boolean; phase?: string } = {}): KubeObject {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: 'default', uid: `${name}-uid`, labels: options.labels ?? { app: 'web' }, ...(options.deleting ? { deletionTimestamp: '2026-01-01T00:00:00Z' } : {}) },
    spec: { nodeName: options.node ?? 'n1', containers: [{ name: 'c', ports: options.port ? [{ name: 'http', containerPort: options.port, protocol: 'TCP' }] : [] }] },
    status: {
      phase: options.phase ?? 'Running',
      ...(options.ip ? { podIP: options.ip } : {}),
      conditions: [{ type: 'Ready', status: options.ready === false ? 'False' : 'True' }],
    },
  };
}

describe('pods → Endpoints and EndpointSlices', () => {
  it('lists ready pods as addresses and the others as not ready, in both objects, and both validate', () => {
    const desired = desiredEndpoints(service({ selector: { app: 'web' }, ports: [{ port: 80, targetPort: 8080, protocol: 'TCP' }] }), [
      pod('a', { ip: '10.42.0.5' }),
      pod('b', { ip: '10.42.0.6', ready: false }),
      pod('c', { ip: '10.42.1.7', node: 'lost' }),
      pod('other', { ip: '10.42.0.9', labels: { app: 'db' } }),
      pod('done', { ip: '10.42.0.10', phase: 'Succeeded' }),
    ], (node) => node !== 'lost')!;
    assert.deepEqual(desired.endpoints.subsets, [
      {
        addresses: [{ ip: '10.42.0.5', nodeName: 'n1', targetRef: { kind: 'Pod', namespace: 'default', name: 'a', uid: 'a-uid' } }],
        notReadyAddresses: [
          { ip: '10.42.0.6', nodeName: 'n1', targetRef: { kind: 'Pod', namespace: 'default', name: 'b', uid: 'b-uid' } },
          { ip: '10.42.1.7', nodeName: 'lost', targetRef: { kind: 'Pod', namespace: 'default', name: 'c', uid: 'c-uid' } },
        ],
        ports: [{ port: 8080, protocol: 'TCP' }],
      },
    ]);
    assert.equal(desired.slices.length, 1);
    const slice = desired.slices[0]!;
    assert.equal(slice.metadata.labels![SERVICE_NAME_LABEL], 'web');
    assert.equal(slice.metadata.labels![MANAGED_BY_LABEL], 'endpointslice-controller.k8s.io');
    assert.deepEqual(slice.metadata.ownerReferences?.[0]?.uid, 'svc-uid');
    assert.deepEqual(
      (slice.endpoints as { addresses: string[]; conditions: { ready: boolean } }[]).map((e) => [e.addresses[0], e.conditions.ready]),
      [['10.42.0.5', true], ['10.42.0.6', false], ['10.42.1.7', false]],
    );
    assert.deepEqual(validateEndpoints(desired.endpoints), []);
    assert.deepEqual(validateEndpointSlice(slice), []);
  });

  it('resolves a named target port per pod: pods that differ get their own subset and slice; a pod without the name is left out', () => {
    const desired = desiredEndpoints(service({ selector: { app: 'web' }, ports: [{ name: 'http', port: 80, targetPort: 'http', protocol: 'TCP' }] }), [
      pod('a', { ip: '10.42.0.5', port: 8080 }),
      pod('b', { ip: '10.42.0.6', port: 9090 }),
      pod('c', { ip: '10.42.0.7' }),
    ])!;
    const subsets = desired.endpoints.subsets as { addresses: { ip: string }[]; ports: { port: number }[] }[];
    assert.deepEqual(subsets.map((s) => [s.addresses.map((a) => a.ip), s.ports.map((p) => p.port)]), [[['10.42.0.5'], [8080]], [['10.42.0.6'], [9090]]]);
    assert.equal(desired.slices.length, 2);
    assert.notEqual(desired.slices[0]!.metadata.name, desired.slices[1]!.metadata.name);
  });

  it('makes the objects for pods without an address (no pod network yet) or with a loopback one, listing nobody', () => {
    const desired = desiredEndpoints(service({ selector: { app: 'web' }, ports: [{ port: 80, targetPort: 80, protocol: 'TCP' }] }), [pod('a'), pod('b', { ip: '127.0.0.1' })])!;
    assert.equal(desired.endpoints.subsets, undefined);
    assert.equal(desired.slices.length, 1);
    assert.deepEqual(desired.slices[0]!.endpoints, []);
    assert.deepEqual(validateEndpointSlice(desired.slices[0]!), []);
  });

  it('leaves a selector-less Service and an ExternalName Service alone; a terminating pod is not ready and marked terminating', () => {
    assert.equal(desiredEndpoints(service({ ports: [{ port: 80 }] }), [pod('a', { ip: '10.42.0.5' })]), undefined);
    assert.equal(desiredEndpoints(service({ type: 'ExternalName', externalName: 'x.example.com', selector: { app: 'web' } }), []), undefined);
    const desired = desiredEndpoints(service({ selector: { app: 'web' }, ports: [{ port: 80, targetPort: 80, protocol: 'TCP' }] }), [pod('a', { ip: '10.42.0.5', deleting: true })])!;
    assert.equal(desired.endpoints.subsets, undefined, 'a terminating pod is in no Endpoints subset');
    assert.deepEqual((desired.slices[0]!.endpoints as { conditions: unknown }[])[0]!.conditions, { ready: false, serving: true, terminating: true });
  });

  it('gives a pod its hostname when its subdomain names the Service (a StatefulSet pod under its governing Service), in both objects', () => {
    const named = (name: string, subdomain: string | undefined, ip: string): KubeObject => {
      const p = pod(name, { ip });
      (p.spec as Record<string, unknown>).hostname = name;
      if (subdomain) (p.spec as Record<string, unknown>).subdomain = subdomain;
      return p;
    };
    const desired = desiredEndpoints(service({ selector: { app: 'web' }, clusterIP: 'None', ports: [{ port: 80, protocol: 'TCP' }] }), [
      named('web-0', 'web', '10.42.0.5'),
      named('web-1', 'other', '10.42.0.6'),
      named('web-2', undefined, '10.42.0.7'),
    ])!;
    const addresses = (desired.endpoints.subsets as { addresses: { ip: string; hostname?: string }[] }[])[0]!.addresses;
    assert.deepEqual(addresses.map((a) => [a.ip, a.hostname]), [['10.42.0.5', 'web-0'], ['10.42.0.6', undefined], ['10.42.0.7', undefined]]);
    const endpoints = desired.slices[0]!.endpoints as { addresses: string[]; hostname?: string }[];
    assert.deepEqual(endpoints.map((e) => [e.addresses[0], e.hostname]), [['10.42.0.5', 'web-0'], ['10.42.0.6', undefined], ['10.42.0.7', undefined]]);
    assert.deepEqual(validateEndpointSlice(desired.slices[0]!), []);
  });

  it('Endpoints and EndpointSlice validation refuse what kube-apiserver refuses', () => {
    const ep: KubeObject = { apiVersion: 'v1', kind: 'Endpoints', metadata: { name: 'x' }, subsets: [{ addresses: [{ ip: '127.0.0.1' }, { ip: 'nope' }], ports: [{ port: 0, protocol: 'TCP' }] }] };
    assert.deepEqual(validateEndpoints(ep).map((c) => c.field), ['subsets[0].addresses[0].ip', 'subsets[0].addresses[1].ip', 'subsets[0].ports[0].port']);
    const slice: KubeObject = { apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata: { name: 'x' }, addressType: 'IPv4', endpoints: [{ addresses: ['fd00::1'] }, { addresses: [] }], ports: [] };
    assert.deepEqual(validateEndpointSlice(slice).map((c) => c.field), ['endpoints[0].addresses[0]', 'endpoints[1].addresses']);
    assert.match(validateEndpointSlice({ ...slice, addressType: 'IPX', endpoints: [] }).map((c) => c.message).join(), /Unsupported value: "IPX"/);
  });
});
