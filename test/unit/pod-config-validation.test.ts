import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { validatePod, validatePodSpec } from '../../src/apiserver/kinds/pods.js';

/** kube-apiserver's rules for volumes, volumeMounts, env and envFrom, with its wording. */

function problems(spec: Record<string, unknown>): string[] {
  return validatePod({ metadata: { name: 'p' }, spec: { containers: [{ name: 'c', command: ['true'] }], ...spec } }).map(
    (c) => `${c.field}: ${c.message}`,
  );
}

function container(fields: Record<string, unknown>): Record<string, unknown> {
  return { containers: [{ name: 'c', command: ['true'], ...fields }] };
}

describe('pod volumes and env validation', () => {
  it('a well-formed pod passes', () => {
    assert.deepEqual(
      problems({
        volumes: [
          { name: 'cfg', configMap: { name: 'app', defaultMode: 0o644, items: [{ key: 'a.conf', path: 'conf/a.conf', mode: 0o400 }] } },
          { name: 'sec', secret: { secretName: 'tls', optional: true } },
          { name: 'scratch', emptyDir: {} },
        ],
        containers: [
          {
            name: 'c',
            command: ['true'],
            env: [
              { name: 'A', value: 'x' },
              { name: 'my.var-1', valueFrom: { configMapKeyRef: { name: 'app', key: 'a.conf' } } },
              { name: 'B', value: '', valueFrom: { secretKeyRef: { name: 'tls', key: 'tls.key', optional: true } } },
              { name: 'C', valueFrom: { fieldRef: { fieldPath: "metadata.labels['app']" } } },
              { name: 'D', valueFrom: { fieldRef: { apiVersion: 'v1', fieldPath: 'status.podIP' } } },
            ],
            envFrom: [{ configMapRef: { name: 'app' }, prefix: 'APP_' }, { secretRef: { name: 'tls', optional: true } }],
            volumeMounts: [
              { name: 'cfg', mountPath: '/etc/app', readOnly: true },
              { name: 'scratch', mountPath: '/data', subPath: 'one/two' },
            ],
          },
        ],
      }),
      [],
    );
  });

  it('volumes: names, one source each, configMap and secret sources', () => {
    assert.deepEqual(
      problems({
        volumes: [
          { name: 'a', emptyDir: {} },
          { name: 'a', emptyDir: {} },
          { name: 'Bad_Name', emptyDir: {} },
          { name: 'none' },
          { name: 'two', emptyDir: {}, configMap: { name: 'x' } },
          { name: 'cm', configMap: { defaultMode: 0o1000, items: [{ key: '', path: '/abs' }, { key: 'k', path: '../up', mode: -1 }, { key: 'k', path: '..hidden' }] } },
          { name: 'sec', secret: {} },
        ],
      }),
      [
        'spec.volumes[1].name: Duplicate value: "a"',
        `spec.volumes[2].name: Invalid value: "Bad_Name": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character`,
        'spec.volumes[3]: Required value: must specify a volume type',
        'spec.volumes[4].configMap: Forbidden: may not specify more than 1 volume type',
        'spec.volumes[5].configMap.name: Required value',
        'spec.volumes[5].configMap.defaultMode: Invalid value: 512: must be a number between 0 and 0777 (octal), both inclusive',
        'spec.volumes[5].configMap.items[0].key: Required value',
        'spec.volumes[5].configMap.items[0].path: Invalid value: "/abs": must be a relative path',
        `spec.volumes[5].configMap.items[1].path: Invalid value: "../up": must not contain '..'`,
        'spec.volumes[5].configMap.items[1].mode: Invalid value: -1: must be a number between 0 and 0777 (octal), both inclusive',
        `spec.volumes[5].configMap.items[2].path: Invalid value: "..hidden": must not start with '..'`,
        'spec.volumes[6].secret.secretName: Required value',
      ],
    );
  });

  it('emptyDir, hostPath, downwardAPI and projected sources', () => {
    assert.deepEqual(
      problems({
        volumes: [
          { name: 'ok-mem', emptyDir: { medium: 'Memory', sizeLimit: '64Mi' } },
          { name: 'ok-host', hostPath: { path: '/var/log', type: 'DirectoryOrCreate' } },
          { name: 'ok-info', downwardAPI: { items: [{ path: 'labels', fieldRef: { fieldPath: 'metadata.labels' } }, { path: 'cpu', resourceFieldRef: { containerName: 'c', resource: 'limits.cpu', divisor: '1m' } }] } },
          {
            name: 'ok-api',
            projected: {
              defaultMode: 0o644,
              sources: [
                { serviceAccountToken: { path: 'token', expirationSeconds: 3607 } },
                { configMap: { name: 'kube-root-ca.crt', items: [{ key: 'ca.crt', path: 'ca.crt' }] } },
                { downwardAPI: { items: [{ path: 'namespace', fieldRef: { apiVersion: 'v1', fieldPath: 'metadata.namespace' } }] } },
              ],
            },
          },
        ],
      }),
      [],
    );
    assert.deepEqual(
      problems({
        volumes: [
          { name: 'mem', emptyDir: { medium: 'HugePages', sizeLimit: 'lots' } },
          { name: 'neg', emptyDir: { sizeLimit: '-1Gi' } },
          { name: 'h1', hostPath: { path: '' } },
          { name: 'h2', hostPath: { path: '/var/../etc', type: 'Folder' } },
          { name: 'h3', hostPath: { path: 'relative/dir' } },
          { name: 'd', downwardAPI: { items: [{ path: '..x', fieldRef: { fieldPath: 'spec.nodeName' } }, { path: 'r', resourceFieldRef: { resource: 'limits.gpu' } }, { path: 'none' }] } },
          {
            name: 'p',
            projected: {
              sources: [
                { secret: { name: 's', items: [{ key: 'a', path: 'dup' }] }, configMap: { name: 'c' } },
                { configMap: { name: 'c', items: [{ key: 'b', path: 'dup' }] } },
                { serviceAccountToken: { path: '/abs', expirationSeconds: 60 } },
                {},
              ],
            },
          },
        ],
      }),
      [
        'spec.volumes[0].emptyDir.medium: Unsupported value: "HugePages": supported values: "", "Memory"',
        `spec.volumes[0].emptyDir.sizeLimit: Invalid value: "lots": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'`,
        'spec.volumes[1].emptyDir.sizeLimit: Forbidden: SizeLimit field must be a valid resource quantity',
        'spec.volumes[2].hostPath.path: Required value',
        `spec.volumes[3].hostPath.path: Invalid value: "/var/../etc": must not contain '..'`,
        'spec.volumes[3].hostPath.type: Unsupported value: "Folder": supported values: "", "BlockDevice", "CharDevice", "Directory", "DirectoryOrCreate", "File", "FileOrCreate", "Socket"',
        `spec.volumes[4].hostPath.path: Invalid value: "relative/dir": must be an absolute path (Drover resolves nothing against the agent's working directory)`,
        `spec.volumes[5].downwardAPI.path: Invalid value: "..x": must not start with '..'`,
        'spec.volumes[5].downwardAPI.fieldRef.fieldPath: Unsupported value: "spec.nodeName": supported values: "metadata.annotations", "metadata.labels", "metadata.name", "metadata.namespace", "metadata.uid"',
        'spec.volumes[5].downwardAPI.resourceFieldRef.containerName: Required value',
        'spec.volumes[5].downwardAPI.resourceFieldRef.resource: Unsupported value: "limits.gpu": supported values: "limits.cpu", "limits.ephemeral-storage", "limits.memory", "requests.cpu", "requests.ephemeral-storage", "requests.memory"',
        'spec.volumes[5].downwardAPI: Required value: one of fieldRef and resourceFieldRef is required',
        'spec.volumes[6].projected.sources[0]: Forbidden: may not specify more than 1 volume type',
        'spec.volumes[6].projected: Invalid value: "c": conflicting duplicate paths',
        'spec.volumes[6].projected.sources[2].serviceAccountToken.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes',
        'spec.volumes[6].projected.path: Invalid value: "/abs": must be a relative path',
        'spec.volumes[6].projected.sources[3]: Required value: must specify one of: `secret`, `configMap`, `downwardAPI`, `serviceAccountToken`',
      ],
    );
  });

  it('mount paths compare as the node lays them out; mountPropagation values, Bidirectional only when privileged', () => {
    assert.deepEqual(
      problems({
        volumes: [{ name: 'v', emptyDir: {} }],
        ...container({
          volumeMounts: [
            { name: 'v', mountPath: '/data' },
            { name: 'v', mountPath: '/data/' },
            { name: 'v', mountPath: '/b', mountPropagation: 'Sideways' },
            { name: 'v', mountPath: '/c', mountPropagation: 'Bidirectional' },
            { name: 'v', mountPath: '/d', mountPropagation: 'HostToContainer' },
          ],
        }),
      }),
      [
        'spec.containers[0].volumeMounts[1].mountPath: Invalid value: "/data/": must be unique',
        'spec.containers[0].volumeMounts[2].mountPropagation: Unsupported value: "Sideways": supported values: "Bidirectional", "HostToContainer", "None"',
        'spec.containers[0].volumeMounts[3].mountPropagation: Forbidden: Bidirectional mount propagation is available only to privileged containers',
      ],
    );
  });

  it('volumeMounts refer to volumes, have unique mount paths, and subPaths stay inside', () => {
    assert.deepEqual(
      problems({
        volumes: [{ name: 'v', emptyDir: {} }],
        ...container({
          volumeMounts: [
            { name: 'v', mountPath: '/a' },
            { name: 'missing', mountPath: '/a' },
            { name: 'v', mountPath: '' },
            { name: 'v', mountPath: '/b', subPath: '../x' },
          ],
        }),
      }),
      [
        'spec.containers[0].volumeMounts[1].name: Not found: "missing"',
        'spec.containers[0].volumeMounts[1].mountPath: Invalid value: "/a": must be unique',
        'spec.containers[0].volumeMounts[2].mountPath: Required value',
        `spec.containers[0].volumeMounts.subPath: Invalid value: "../x": must not contain '..'`,
      ],
    );
  });

  it('env: names, exactly one valueFrom source, key selectors, fieldRef paths', () => {
    assert.deepEqual(
      problems(
        container({
          env: [
            { value: 'x' },
            { name: 'A=B', value: 'x' },
            { name: 'C', valueFrom: {} },
            { name: 'D', value: 'x', valueFrom: { configMapKeyRef: { name: 'm', key: 'k' } } },
            { name: 'E', valueFrom: { configMapKeyRef: { name: 'm', key: 'k' }, secretKeyRef: { name: 's', key: 'k' } } },
            { name: 'F', valueFrom: { configMapKeyRef: { name: 'Bad_Name', key: 'bad key' } } },
            { name: 'G', valueFrom: { secretKeyRef: {} } },
            { name: 'H', valueFrom: { fieldRef: { fieldPath: 'status.phase' } } },
            { name: 'I', valueFrom: { fieldRef: { fieldPath: 'spec.nope' } } },
          ],
        }),
      ),
      [
        'spec.containers[0].env[0].name: Required value',
        'spec.containers[0].env[0].name: Invalid value: "": environment variable name must be non-empty',
        `spec.containers[0].env[1].name: Invalid value: "A=B": a valid environment variable name must consist only of printable ASCII characters other than '='`,
        'spec.containers[0].env[2].valueFrom: Invalid value: "": must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`',
        'spec.containers[0].env[3].valueFrom: Invalid value: "": may not be specified when `value` is not empty',
        'spec.containers[0].env[4].valueFrom: Invalid value: "": may not have more than one field specified at a time',
        `spec.containers[0].env[5].valueFrom.configMapKeyRef.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character`,
        `spec.containers[0].env[5].valueFrom.configMapKeyRef.key: Invalid value: "bad key": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')`,
        'spec.containers[0].env[6].valueFrom.secretKeyRef.name: Required value',
        'spec.containers[0].env[6].valueFrom.secretKeyRef.key: Required value',
        'spec.containers[0].env[7].valueFrom.fieldRef.fieldPath: Unsupported value: "status.phase": supported values: "metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName", "spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs"',
        'spec.containers[0].env[8].valueFrom.fieldRef.fieldPath: Invalid value: "spec.nope": error converting fieldPath: field label not supported: spec.nope',
      ],
    );
  });

  it('envFrom: one source each, names, prefix', () => {
    assert.deepEqual(
      problems(
        container({
          envFrom: [{ prefix: 'P_' }, { configMapRef: { name: 'a' }, secretRef: { name: 'b' } }, { configMapRef: {} }, { secretRef: { name: 'ok' }, prefix: 'X=' }],
        }),
      ),
      [
        'spec.containers[0].envFrom: Invalid value: "": must specify one of: `configMapRef` or `secretRef`',
        'spec.containers[0].envFrom: Invalid value: "": may not have more than one field specified at a time',
        'spec.containers[0].envFrom[2].configMapRef.name: Required value',
        `spec.containers[0].envFrom[3].prefix: Invalid value: "X=": a valid environment variable name must consist only of printable ASCII characters other than '='`,
      ],
    );
  });

  it('workload templates get the same rules at their own path', () => {
    const causes = validatePodSpec({ containers: [{ name: 'c', command: ['true'], volumeMounts: [{ name: 'x', mountPath: '/x' }] }] }, 'spec.template.spec');
    assert.deepEqual(causes.map((c) => `${c.field}: ${c.message}`), ['spec.template.spec.containers[0].volumeMounts[0].name: Not found: "x"']);
  });
});
