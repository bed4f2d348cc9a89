"""
CustomResourceDefinitions and custom objects through the official Python client (Debian's
python3-kubernetes), against a real server that test/e2e/crds.test.ts starts.

A CRD created with ApiextensionsV1Api deserializes with its status (Established), its custom
objects are created, listed, patched (merge patch) and deleted with CustomObjectsApi; the status
subresource is written through patch_namespaced_custom_object_status; a schema violation is a
422 naming the field; deleting the CRD makes its resource a 404.

Usage: /usr/bin/python3 test/python/crd_test.py KUBECONFIG
Every check raises on failure (exit 1 with a traceback); the last line on success is
`PYTHON-SUMMARY {"checks": N}`.
"""

import json
import sys
import time

from kubernetes import client, config
from kubernetes.client.rest import ApiException

CHECKS = 0
GROUP = 'py.example.com'


def check(condition, what):
    global CHECKS
    CHECKS += 1
    if not condition:
        raise AssertionError(what)


def eventually(probe, what, ceiling=30):
    deadline = time.time() + ceiling
    while True:
        try:
            value = probe()
            if value:
                return value
        except ApiException:
            pass
        if time.time() > deadline:
            raise AssertionError('timed out waiting for ' + what)
        time.sleep(0.1)


def main(kubeconfig):
    config.load_kube_config(config_file=kubeconfig)
    ext = client.ApiextensionsV1Api()
    objects = client.CustomObjectsApi()
    crd = client.V1CustomResourceDefinition(
        metadata=client.V1ObjectMeta(name='gizmos.' + GROUP),
        spec=client.V1CustomResourceDefinitionSpec(
            group=GROUP,
            scope='Namespaced',
            names=client.V1CustomResourceDefinitionNames(plural='gizmos', kind='Gizmo'),
            versions=[client.V1CustomResourceDefinitionVersion(
                name='v1', served=True, storage=True,
                subresources=client.V1CustomResourceSubresources(status={}),
                schema=client.V1CustomResourceValidation(open_apiv3_schema=client.V1JSONSchemaProps(
                    type='object',
                    properties={
                        'spec': client.V1JSONSchemaProps(type='object', properties={
                            'count': client.V1JSONSchemaProps(type='integer', minimum=1),
                            'mode': client.V1JSONSchemaProps(type='string', default='fast'),
                        }),
                        'status': client.V1JSONSchemaProps(type='object', properties={
                            'ready': client.V1JSONSchemaProps(type='boolean'),
                        }),
                    },
                )),
            )],
        ),
    )
    created = ext.create_custom_resource_definition(crd)
    check(created.metadata.name == 'gizmos.' + GROUP, 'the CRD was created')
    check(created.spec.names.singular == 'gizmo', 'singular defaulted from the kind')

    def is_established():
        got = ext.read_custom_resource_definition('gizmos.' + GROUP)
        return any(c.type == 'Established' and c.status == 'True' for c in (got.status.conditions or []))
    eventually(is_established, 'the CRD Established')
    check(True, 'Established read back through the typed client')

    body = {'apiVersion': GROUP + '/v1', 'kind': 'Gizmo', 'metadata': {'name': 'g1'}, 'spec': {'count': 2, 'extra': 'dropped'}}
    made = eventually(lambda: objects.create_namespaced_custom_object(GROUP, 'v1', 'default', 'gizmos', body), 'the gizmos served')
    check(made['spec'] == {'count': 2, 'mode': 'fast'}, 'defaulted and pruned: %r' % made['spec'])

    listed = objects.list_namespaced_custom_object(GROUP, 'v1', 'default', 'gizmos')
    check([i['metadata']['name'] for i in listed['items']] == ['g1'], 'listed')

    patched = objects.patch_namespaced_custom_object(GROUP, 'v1', 'default', 'gizmos', 'g1', {'spec': {'count': 5}})
    check(patched['spec']['count'] == 5, 'patched')

    status = objects.patch_namespaced_custom_object_status(GROUP, 'v1', 'default', 'gizmos', 'g1', {'status': {'ready': True}})
    check(status['status'] == {'ready': True} and status['spec']['count'] == 5, 'status written through its subresource')

    try:
        objects.create_namespaced_custom_object(GROUP, 'v1', 'default', 'gizmos', {
            'apiVersion': GROUP + '/v1', 'kind': 'Gizmo', 'metadata': {'name': 'g2'}, 'spec': {'count': 0}})
        raise AssertionError('count 0 was accepted')
    except ApiException as error:
        body = json.loads(error.body)
        check(error.status == 422, 'a schema violation is a 422')
        check([c.get('field') for c in body['details']['causes']] == ['spec.count'], 'naming the field: %r' % body)

    objects.delete_namespaced_custom_object(GROUP, 'v1', 'default', 'gizmos', 'g1')
    ext.delete_custom_resource_definition('gizmos.' + GROUP)

    def gone():
        try:
            objects.list_namespaced_custom_object(GROUP, 'v1', 'default', 'gizmos')
            return False
        except ApiException as error:
            return error.status == 404
    eventually(gone, 'the gizmos resource gone')
    check(True, 'the resource is a 404 after the CRD is deleted')
    print('PYTHON-SUMMARY ' + json.dumps({'checks': CHECKS}))


if __name__ == '__main__':
    main(sys.argv[1])
