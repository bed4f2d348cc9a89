"""
ConfigMaps and Secrets through the official Python client (Debian's python3-kubernetes), against
a real server that test/e2e/configmaps-secrets.test.ts starts.

A Secret created with string_data comes back with the values base64-encoded in data and no
string_data; patches through string_data replace values; the Secret type field selector works;
an immutable Secret refuses new data with a 422 naming the field; bad keys and a docker config
that is not JSON are 422s with their field. A ConfigMap with data and binary_data round-trips.

Usage: /usr/bin/python3 test/python/secrets_test.py KUBECONFIG
Every check raises on failure (exit 1 with a traceback); the last line on success is
`PYTHON-SUMMARY {"checks": N}`.
"""

import base64
import json
import sys

from kubernetes import client, config
from kubernetes.client.rest import ApiException

CHECKS = 0
NAMESPACE = 'py-secrets'


def check(condition, what):
    global CHECKS
    CHECKS += 1
    if not condition:
        raise AssertionError(what)


def b64(text):
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


def unb64(text):
    return base64.b64decode(text).decode()


def refusal(call, *args, **kwargs):
    """The ApiException a call raises, with its Status body parsed."""
    try:
        call(*args, **kwargs)
    except ApiException as error:
        return error, json.loads(error.body)
    raise AssertionError('expected %s to be refused' % call.__name__)


def fields_of(status):
    return [c.get('field') for c in status.get('details', {}).get('causes', [])]


def main(kubeconfig):
    config.load_kube_config(config_file=kubeconfig)
    core = client.CoreV1Api()
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))

    # A Secret with string_data: stored as base64 in data, string_data never comes back.
    created = core.create_namespaced_secret(NAMESPACE, client.V1Secret(
        metadata=client.V1ObjectMeta(name='db', labels={'app': 'db'}),
        string_data={'password': 's3cr3t', 'user': 'admin'},
    ))
    check(created.type == 'Opaque', 'type defaults to Opaque: %r' % created.type)
    check(created.string_data is None, 'string_data is not returned: %r' % created.string_data)
    check(created.data == {'password': b64('s3cr3t'), 'user': b64('admin')}, 'data: %r' % created.data)
    read = core.read_namespaced_secret('db', NAMESPACE)
    check(unb64(read.data['password']) == 's3cr3t', 'password reads back')
    check(read.string_data is None, 'string_data is not stored')

    # data and string_data together: string_data wins for its keys.
    both = core.create_namespaced_secret(NAMESPACE, client.V1Secret(
        metadata=client.V1ObjectMeta(name='both'),
        data={'a': b64('from data'), 'b': b64('kept')},
        string_data={'a': 'from stringData'},
    ))
    check({k: unb64(v) for k, v in both.data.items()} == {'a': 'from stringData', 'b': 'kept'}, 'merge: %r' % both.data)

    # A patch through string_data replaces the value.
    patched = core.patch_namespaced_secret('db', NAMESPACE, {'stringData': {'password': 'rotated'}})
    check(unb64(patched.data['password']) == 'rotated', 'patched password')
    check(unb64(patched.data['user']) == 'admin', 'other keys kept')

    # Typed Secrets and the type field selector.
    core.create_namespaced_secret(NAMESPACE, client.V1Secret(
        metadata=client.V1ObjectMeta(name='web-tls'), type='kubernetes.io/tls',
        string_data={'tls.crt': 'CERT', 'tls.key': 'KEY'},
    ))
    tls_names = [s.metadata.name for s in core.list_namespaced_secret(NAMESPACE, field_selector='type=kubernetes.io/tls').items]
    check(tls_names == ['web-tls'], 'type=kubernetes.io/tls selects: %r' % tls_names)
    opaque_names = sorted(s.metadata.name for s in core.list_namespaced_secret(NAMESPACE, field_selector='type=Opaque').items)
    check(opaque_names == ['both', 'db'], 'type=Opaque selects: %r' % opaque_names)

    # Bad input: each a 4xx Status naming its field.
    error, status = refusal(core.create_namespaced_secret, NAMESPACE, client.V1Secret(
        metadata=client.V1ObjectMeta(name='bad-key'), string_data={'not ok': 'x'}))
    check(error.status == 422 and fields_of(status) == ['data[not ok]'], 'bad key: %s %s' % (error.status, status))
    error, status = refusal(core.create_namespaced_secret, NAMESPACE, client.V1Secret(
        metadata=client.V1ObjectMeta(name='bad-docker'), type='kubernetes.io/dockerconfigjson',
        string_data={'.dockerconfigjson': '{"auths": hunter2'}))
    check(error.status == 422 and fields_of(status) == ['data[.dockerconfigjson]'], 'bad docker config: %s' % status)
    check('hunter2' not in error.body, 'the value is not echoed')
    error, status = refusal(core.create_namespaced_secret, NAMESPACE, client.V1Secret(
        metadata=client.V1ObjectMeta(name='no-tls-key'), type='kubernetes.io/tls', string_data={'tls.crt': 'CERT'}))
    check(error.status == 422 and fields_of(status) == ['data[tls.key]'], 'tls without its key: %s' % status)
    error, status = refusal(core.patch_namespaced_secret, 'web-tls', NAMESPACE, {'type': 'Opaque'})
    check(error.status == 422 and fields_of(status) == ['type'], 'type is fixed: %s' % status)

    # Immutable: data is frozen, the flag stays, metadata may change.
    core.patch_namespaced_secret('db', NAMESPACE, {'immutable': True})
    error, status = refusal(core.patch_namespaced_secret, 'db', NAMESPACE, {'stringData': {'password': 'again'}})
    check(error.status == 422 and fields_of(status) == ['data'], 'immutable data: %s' % status)
    error, status = refusal(core.patch_namespaced_secret, 'db', NAMESPACE, {'immutable': False})
    check(error.status == 422 and fields_of(status) == ['immutable'], 'immutable flag: %s' % status)
    relabelled = core.patch_namespaced_secret('db', NAMESPACE, {'metadata': {'labels': {'tier': 'data'}}})
    check(relabelled.metadata.labels == {'app': 'db', 'tier': 'data'}, 'labels still change')

    # A ConfigMap with data and binary_data.
    cm = core.create_namespaced_config_map(NAMESPACE, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name='settings'),
        data={'mode': 'fast', 'app.properties': 'a=1\nb=2\n'},
        binary_data={'logo.bin': b64(bytes([0, 1, 255]))},
    ))
    check(cm.data == {'mode': 'fast', 'app.properties': 'a=1\nb=2\n'}, 'configmap data: %r' % cm.data)
    check(base64.b64decode(core.read_namespaced_config_map('settings', NAMESPACE).binary_data['logo.bin']) == bytes([0, 1, 255]), 'binary data')
    error, status = refusal(core.create_namespaced_config_map, NAMESPACE, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name='dup'), data={'k': 'v'}, binary_data={'k': b64('v')}))
    check(error.status == 422 and fields_of(status) == ['data[k]'], 'a key in both maps: %s' % status)

    # Delete: the immutable one too.
    for name in ('db', 'both', 'web-tls'):
        core.delete_namespaced_secret(name, NAMESPACE)
    core.delete_namespaced_config_map('settings', NAMESPACE)
    check(core.list_namespaced_secret(NAMESPACE).items == [], 'secrets gone')
    # kube-root-ca.crt is the cluster's (the root-CA publisher keeps it in every namespace).
    left = [c.metadata.name for c in core.list_namespaced_config_map(NAMESPACE).items]
    check(left in ([], ['kube-root-ca.crt']), 'configmaps gone: %r' % left)
    core.delete_namespace(NAMESPACE)
    print('PYTHON-SUMMARY %s' % json.dumps({'checks': CHECKS}))


if __name__ == '__main__':
    main(sys.argv[1])
