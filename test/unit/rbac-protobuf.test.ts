import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decodeKubernetesProtobuf } from '../../src/apiserver/protobuf.js';

/**
 * The protobuf bodies kubectl 1.32 sends for the RBAC kinds and the access reviews, captured from
 * the real client (`kubectl -v=8` prints them), decoded into the JSON a JSON client would send.
 */

const CAPTURED = {
  // kubectl create role r4 -n a --verb=get,list --resource=pods,deployments.apps --resource-name=x
  role: '6b3873000a240a1c726261632e617574686f72697a6174696f6e2e6b38732e696f2f76311204526f6c6512500a130a02723412001a016122002a0032003800420012160a036765740a046c69737412001a04706f647322017812210a036765740a046c6973741204617070731a0b6465706c6f796d656e74732201781a002200',
  // kubectl create clusterrole agg1 --aggregation-rule=example.com/aggregate-to-x=true
  clusterRoleAggregation:
    '6b3873000a2b0a1c726261632e617574686f72697a6174696f6e2e6b38732e696f2f7631120b436c7573746572526f6c65123e0a140a046167673112001a0022002a003200380042001a260a240a220a1a6578616d706c652e636f6d2f6167677265676174652d746f2d781204747275651a002200',
  // kubectl create clusterrole urls1 --verb=get --non-resource-url=/logs,/healthz/*
  clusterRoleUrls:
    '6b3873000a2b0a1c726261632e617574686f72697a6174696f6e2e6b38732e696f2f7631120b436c7573746572526f6c6512310a150a0575726c733112001a0022002a0032003800420012180a036765742a052f6c6f67732a0a2f6865616c74687a2f2a1a002200',
  // kubectl create rolebinding b6 -n a --role=r4 --serviceaccount=a:s1 --group=g1
  roleBinding:
    '6b3873000a2b0a1c726261632e617574686f72697a6174696f6e2e6b38732e696f2f7631120b526f6c6542696e64696e671281010a130a02623612001a016122002a0032003800420012280a0547726f75701219726261632e617574686f72697a6174696f6e2e6b38732e696f1a026731220012190a0e536572766963654163636f756e7412001a0273312201611a250a19726261632e617574686f72697a6174696f6e2e6b38732e696f1204526f6c651a0272341a002200',
  // kubectl create clusterrolebinding cb4 --clusterrole=view --serviceaccount=a:sa1 --user=u1
  clusterRoleBinding:
    '6b3873000a320a1c726261632e617574686f72697a6174696f6e2e6b38732e696f2f76311212436c7573746572526f6c6542696e64696e67128a010a130a0363623412001a0022002a0032003800420012270a04557365721219726261632e617574686f72697a6174696f6e2e6b38732e696f1a0275312200121a0a0e536572766963654163636f756e7412001a037361312201611a2e0a19726261632e617574686f72697a6174696f6e2e6b38732e696f120b436c7573746572526f6c651a04766965771a002200',
  // kubectl auth whoami
  selfSubjectReview:
    '6b3873000a2d0a1861757468656e7469636174696f6e2e6b38732e696f2f7631121153656c665375626a656374526576696577121a0a100a0012001a0022002a0032003800420012060a040a0012001a002200',
  // kubectl auth can-i --list -n a
  selfSubjectRulesReview:
    '6b3873000a310a17617574686f72697a6174696f6e2e6b38732e696f2f7631121653656c665375626a65637452756c6573526576696577121d0a100a0012001a0022002a0032003800420012030a01611a04180022001a002200',
  // kubectl auth can-i get pods (namespace default)
  selfSubjectAccessReview:
    '6b3873000a320a17617574686f72697a6174696f6e2e6b38732e696f2f7631121753656c665375626a656374416363657373526576696577123c0a100a0012001a0022002a00320038004200121e0a1c0a0764656661756c7412036765741a0022002a04706f647332003a001a08080012001a0020001a002200',
  // kubectl auth can-i get /logs
  selfSubjectAccessReviewPath:
    '6b3873000a320a17617574686f72697a6174696f6e2e6b38732e696f2f7631121753656c665375626a656374416363657373526576696577122c0a100a0012001a0022002a00320038004200120e120c0a052f6c6f677312036765741a08080012001a0020001a002200',
  // kubectl auth can-i create pods --subresource=eviction -n a
  selfSubjectAccessReviewSubresource:
    '6b3873000a320a17617574686f72697a6174696f6e2e6b38732e696f2f7631121753656c665375626a65637441636365737352657669657712410a100a0012001a0022002a0032003800420012230a210a016112066372656174651a0022002a04706f647332086576696374696f6e3a001a08080012001a0020001a002200',
} as const;

const decode = (hex: string): Record<string, unknown> => decodeKubernetesProtobuf(Buffer.from(hex, 'hex')).object;
const RBAC = 'rbac.authorization.k8s.io';

describe('protobuf bodies of kubectl 1.32 for RBAC and access reviews', () => {
  it('create role: rules with groups, resources and names, in the namespace of the request', () => {
    assert.deepEqual(decode(CAPTURED.role), {
      apiVersion: `${RBAC}/v1`,
      kind: 'Role',
      metadata: { name: 'r4', namespace: 'a' },
      rules: [
        { verbs: ['get', 'list'], apiGroups: [''], resources: ['pods'], resourceNames: ['x'] },
        { verbs: ['get', 'list'], apiGroups: ['apps'], resources: ['deployments'], resourceNames: ['x'] },
      ],
    });
  });

  it('create clusterrole: an aggregation rule, and non-resource URLs', () => {
    assert.deepEqual(decode(CAPTURED.clusterRoleAggregation), {
      apiVersion: `${RBAC}/v1`,
      kind: 'ClusterRole',
      metadata: { name: 'agg1' },
      rules: [],
      aggregationRule: { clusterRoleSelectors: [{ matchLabels: { 'example.com/aggregate-to-x': 'true' } }] },
    });
    assert.deepEqual(decode(CAPTURED.clusterRoleUrls), {
      apiVersion: `${RBAC}/v1`,
      kind: 'ClusterRole',
      metadata: { name: 'urls1' },
      rules: [{ verbs: ['get'], nonResourceURLs: ['/logs', '/healthz/*'] }],
    });
  });

  it('create rolebinding and clusterrolebinding: subjects of each kind and the roleRef', () => {
    assert.deepEqual(decode(CAPTURED.roleBinding), {
      apiVersion: `${RBAC}/v1`,
      kind: 'RoleBinding',
      metadata: { name: 'b6', namespace: 'a' },
      subjects: [
        { kind: 'Group', apiGroup: RBAC, name: 'g1' },
        { kind: 'ServiceAccount', name: 's1', namespace: 'a' },
      ],
      roleRef: { apiGroup: RBAC, kind: 'Role', name: 'r4' },
    });
    assert.deepEqual(decode(CAPTURED.clusterRoleBinding), {
      apiVersion: `${RBAC}/v1`,
      kind: 'ClusterRoleBinding',
      metadata: { name: 'cb4' },
      subjects: [
        { kind: 'User', apiGroup: RBAC, name: 'u1' },
        { kind: 'ServiceAccount', name: 'sa1', namespace: 'a' },
      ],
      roleRef: { apiGroup: RBAC, kind: 'ClusterRole', name: 'view' },
    });
  });

  it('auth can-i: resource attributes (with a subresource) and a non-resource path; the status sent is not taken', () => {
    assert.deepEqual(decode(CAPTURED.selfSubjectAccessReview), {
      apiVersion: 'authorization.k8s.io/v1',
      kind: 'SelfSubjectAccessReview',
      metadata: {},
      spec: { resourceAttributes: { namespace: 'default', verb: 'get', resource: 'pods' } },
    });
    assert.deepEqual(decode(CAPTURED.selfSubjectAccessReviewSubresource).spec, {
      resourceAttributes: { namespace: 'a', verb: 'create', resource: 'pods', subresource: 'eviction' },
    });
    assert.deepEqual(decode(CAPTURED.selfSubjectAccessReviewPath).spec, { nonResourceAttributes: { path: '/logs', verb: 'get' } });
  });

  it('auth can-i --list and auth whoami', () => {
    assert.deepEqual(decode(CAPTURED.selfSubjectRulesReview), {
      apiVersion: 'authorization.k8s.io/v1',
      kind: 'SelfSubjectRulesReview',
      metadata: {},
      spec: { namespace: 'a' },
    });
    assert.deepEqual(decode(CAPTURED.selfSubjectReview), { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview', metadata: {} });
  });
});
