"""
Drover through the official Python client (Debian's python3-kubernetes, 22.6 at the time of
writing), against a real server with an embedded agent that test/python-client.test.ts starts.

The client writes every boolean query parameter as Python spells it (`watch=True`,
`follow=True`, `allowWatchBookmarks=True`), so this is where the server's reading of booleans
meets a real client: watches of nodes and pods (ADDED, MODIFIED, DELETED, from a
resourceVersion, ended by timeoutSeconds), bookmarks, a followed pod log, and DynamicClient
discovery and CRUD.

Usage: /usr/bin/python3 test/python/client_test.py KUBECONFIG WORKDIR
Every check raises on failure (exit 1 with a traceback); the last line on success is
`PYTHON-SUMMARY {"checks": N, "events": N, "seconds": S}`.
"""

import json
import os
import sys
import time

from kubernetes import client, config, dynamic, watch
from kubernetes.client.rest import ApiException
from kubernetes.dynamic.exceptions import ConflictError, NotFoundError
from kubernetes.watch.watch import iter_resp_lines

CHECKS = 0
EVENTS = 0
NAMESPACE = 'py-client'
# Generous ceilings: the machine running the suite may be loaded.
CEILING_S = 90


def check(condition, what):
    global CHECKS
    CHECKS += 1
    if not condition:
        raise AssertionError(what)


def eventually(probe, what, ceiling=CEILING_S):
    """Poll `probe` until it returns something truthy; fail after `ceiling` seconds."""
    deadline = time.monotonic() + ceiling
    last = None
    while True:
        try:
            value = probe()
            if value:
                return value
        except Exception as error:  # noqa: BLE001 - reported if the ceiling passes
            last = error
        if time.monotonic() > deadline:
            raise AssertionError('timed out waiting for %s (last error: %r)' % (what, last))
        time.sleep(0.2)


def summary(events):
    return ['%s %s' % (e['type'], e['raw_object'].get('metadata', {}).get('name', '')) for e in events]


def rv_of(event):
    return int(event['raw_object']['metadata']['resourceVersion'])


def consume(stream, on_event, what):
    """
    Feed watch events to `on_event` until it returns True. The stream's own timeoutSeconds bounds
    the wait: a stream that ends first fails the check.
    """
    global EVENTS
    seen = []
    for event in stream:
        EVENTS += 1
        seen.append(event)
        if on_event(event, seen):
            stream.close()
            return seen
    raise AssertionError('the watch for %s ended before it was done; saw %s' % (what, summary(seen)))


def pod_body(name, labels, command):
    return {
        'apiVersion': 'v1',
        'kind': 'Pod',
        'metadata': {'name': name, 'labels': labels},
        'spec': {
            'terminationGracePeriodSeconds': 2,
            'containers': [{'name': 'main', 'image': 'busybox', 'command': command}],
        },
    }


def test_node_watch(core):
    """Node changes made before the watch are replayed from resource_version, in order."""
    rv = core.list_node().metadata.resource_version
    name = 'py-node'
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name, labels={'py': 'one'})))
    core.patch_node(name, {'metadata': {'labels': {'py': 'two'}}})
    core.delete_node(name)
    w = watch.Watch()
    events = consume(
        w.stream(core.list_node, resource_version=rv, timeout_seconds=60, field_selector='metadata.name=' + name),
        lambda event, seen: event['type'] == 'DELETED',
        'the node py-node',
    )
    types = [e['type'] for e in events]
    check(types[0] == 'ADDED' and types[-1] == 'DELETED', 'node events start ADDED, end DELETED: %s' % types)
    check(all(isinstance(e['object'], client.V1Node) for e in events), 'events carry V1Node objects')
    check(events[0]['object'].metadata.labels.get('py') == 'one', 'ADDED carries the created labels')
    modified = [e for e in events if e['type'] == 'MODIFIED']
    check(any(e['object'].metadata.labels.get('py') == 'two' for e in modified), 'a MODIFIED carries the patch: %s' % types)
    versions = [rv_of(e) for e in events]
    check(versions == sorted(versions) and len(set(versions)) == len(versions), 'resourceVersions increase: %s' % versions)
    check(min(versions) > int(rv), 'only changes after the resource_version asked for')
    check(w.resource_version == events[-1]['object'].metadata.resource_version, 'the Watch tracks the last resourceVersion')
    print('ok: node watch from resource_version:', ', '.join(types))


def test_pod_watch(core):
    """
    A live pod watch: each change is made only once the watch has shown the previous one, so the
    events come over an open stream, not from history.
    """
    rv = core.list_namespaced_pod(NAMESPACE).metadata.resource_version
    name = 'py-watched'
    core.create_namespaced_pod(NAMESPACE, pod_body(name, {'app': 'py-watch'}, ['sleep', '3600']))
    state = {'patched': False, 'deleted': False}

    def step(event, seen):
        obj = event['object']
        check(isinstance(obj, client.V1Pod), 'pod events carry V1Pod objects')
        if event['type'] == 'ADDED' and not state['patched']:
            core.patch_namespaced_pod(name, NAMESPACE, {'metadata': {'labels': {'step': 'patched'}}})
            state['patched'] = True
        elif event['type'] == 'MODIFIED' and (obj.metadata.labels or {}).get('step') == 'patched' and not state['deleted']:
            core.delete_namespaced_pod(name, NAMESPACE)
            state['deleted'] = True
        return event['type'] == 'DELETED'

    w = watch.Watch()
    events = consume(
        w.stream(core.list_namespaced_pod, NAMESPACE, label_selector='app=py-watch', resource_version=rv, timeout_seconds=CEILING_S),
        step,
        'the pod py-watched',
    )
    types = [e['type'] for e in events]
    check(types[0] == 'ADDED', 'the first pod event is ADDED: %s' % types)
    check('MODIFIED' in types and types[-1] == 'DELETED', 'then MODIFIED, and DELETED last: %s' % types)
    check(types.count('ADDED') == 1 and types.count('DELETED') == 1, 'one ADDED and one DELETED: %s' % types)
    versions = [rv_of(e) for e in events]
    check(versions == sorted(versions), 'resourceVersions increase: %s' % versions)
    print('ok: live pod watch:', ', '.join(types))


def test_timeout_and_bookmarks(core, coordination):
    # Without allow_watch_bookmarks: the watch stays open until timeout_seconds, then ends cleanly
    # (a plain list, which the server once answered to watch=True, would end at once).
    rv = core.list_node().metadata.resource_version
    started = time.monotonic()
    events = list(watch.Watch().stream(core.list_node, resource_version=rv, timeout_seconds=3))
    elapsed = time.monotonic() - started
    global EVENTS
    EVENTS += len(events)
    check(elapsed >= 2.5, 'the watch stayed open until its timeout (ended after %.1fs)' % elapsed)
    check(elapsed < CEILING_S, 'the watch ended at its timeout (after %.1fs)' % elapsed)
    check(all(e['type'] != 'BOOKMARK' for e in events), 'no BOOKMARK unless asked for: %s' % summary(events))

    # With it: a write elsewhere moves the revision on, and a BOOKMARK (a Node with only a
    # resourceVersion) reports it. The server under test sends them every second.
    rv = core.list_node().metadata.resource_version
    lease = coordination.create_namespaced_lease(
        NAMESPACE, client.V1Lease(metadata=client.V1ObjectMeta(name='py-bookmark'), spec=client.V1LeaseSpec(holder_identity='py')),
    )
    events = consume(
        watch.Watch().stream(core.list_node, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=CEILING_S),
        lambda event, seen: event['type'] == 'BOOKMARK',
        'a BOOKMARK',
    )
    bookmark = events[-1]['raw_object']
    check(bookmark['kind'] == 'Node' and bookmark['apiVersion'] == 'v1', 'the bookmark is a v1 Node: %s' % bookmark)
    check(set(bookmark['metadata']) == {'resourceVersion'}, 'the bookmark carries only a resourceVersion: %s' % bookmark)
    check(
        int(bookmark['metadata']['resourceVersion']) >= int(lease.metadata.resource_version),
        'the bookmark reports the revision of the later write (%s >= %s)' % (bookmark['metadata']['resourceVersion'], lease.metadata.resource_version),
    )
    print('ok: timeout_seconds ended a watch after %.1fs; bookmark at resourceVersion %s' % (elapsed, bookmark['metadata']['resourceVersion']))


def line_number(line):
    check(line.startswith('line '), 'a log line from the pod: %r' % line)
    return int(line.split()[1])


def test_logs(core):
    name = 'py-logger'
    core.create_namespaced_pod(
        NAMESPACE, pod_body(name, {'app': 'py-logger'}, ['sh', '-c', 'i=0; while :; do i=$((i+1)); echo "line $i"; sleep 0.2; done']),
    )
    eventually(lambda: core.read_namespaced_pod(name, NAMESPACE).status.phase == 'Running', 'the logger pod to run')
    eventually(lambda: core.read_namespaced_pod_log(name, NAMESPACE).startswith('line 1\n'), 'its first log line')

    # follow=True with tail_lines=1: one line is there already; the rest can only come by following.
    response = core.read_namespaced_pod_log(name, NAMESPACE, follow=True, tail_lines=1, _preload_content=False)
    numbers = []
    try:
        for line in iter_resp_lines(response):
            numbers.append(line_number(line))
            if len(numbers) == 6:
                break
    finally:
        response.close()
        response.release_conn()
    check(len(numbers) == 6, 'a followed log keeps streaming: got %s' % numbers)
    check(numbers == list(range(numbers[0], numbers[0] + 6)), 'lines arrive in order, none lost: %s' % numbers)

    # The client's own follow helper: Watch().stream over read_namespaced_pod_log.
    w = watch.Watch()
    lines = []
    for line in w.stream(core.read_namespaced_pod_log, name=name, namespace=NAMESPACE, tail_lines=1):
        lines.append(line_number(line))
        if len(lines) == 4:
            w.stop()
            break
    check(lines == list(range(lines[0], lines[0] + 4)) and lines[0] >= numbers[-1], 'Watch().stream follows the log on: %s' % lines)

    # follow=False, previous=False: a bounded answer.
    text = core.read_namespaced_pod_log(name, NAMESPACE, follow=False, previous=False, tail_lines=2)
    check(len(text.splitlines()) == 2, 'tail_lines=2 without follow: %r' % text)

    # previous=True asks for a previous run, and this container has none: 400.
    try:
        core.read_namespaced_pod_log(name, NAMESPACE, previous=True)
        check(False, 'previous=True must be honoured (this container never restarted)')
    except ApiException as error:
        check(error.status == 400, 'previous=True without a previous run is 400: %s %s' % (error.status, error.body))
    core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
    print('ok: followed log lines %s, then %s' % (numbers, lines))


def test_dynamic(api_client, workdir):
    dc = dynamic.DynamicClient(api_client, cache_file=os.path.join(workdir, 'discovery-cache.json'))
    check(dc.version['kubernetes']['major'] == '1', 'DynamicClient reads /version: %s' % dc.version)

    pods = dc.resources.get(api_version='v1', kind='Pod')
    check(pods.namespaced and pods.name == 'pods', 'v1 Pod is discovered, namespaced')
    check({'log', 'status', 'eviction'} <= set(pods.subresources), 'pod subresources: %s' % sorted(pods.subresources))
    nodes = dc.resources.get(api_version='v1', kind='Node')
    check(not nodes.namespaced, 'v1 Node is cluster-scoped')
    namespaces = dc.resources.get(api_version='v1', kind='Namespace')
    check(not namespaces.namespaced, 'v1 Namespace is cluster-scoped')
    deployments = dc.resources.get(api_version='apps/v1', kind='Deployment')
    check(deployments.namespaced and {'scale', 'status'} <= set(deployments.subresources), 'apps/v1 Deployment with scale and status')
    check(dc.resources.get(api_version='coordination.k8s.io/v1', kind='Lease').namespaced, 'coordination.k8s.io/v1 Lease')
    check(dc.resources.get(api_version='policy/v1', kind='PodDisruptionBudget').namespaced, 'policy/v1 PodDisruptionBudget')
    check(len(dc.resources.search(kind='Event')) >= 2, 'Event in v1 and events.k8s.io/v1')

    # Namespace CRUD (cluster-scoped).
    ns = namespaces.create(body={'metadata': {'name': 'py-dynamic-ns'}})
    check(ns.status.phase == 'Active', 'a created namespace is Active')
    namespaces.delete(name='py-dynamic-ns')
    try:
        namespaces.get(name='py-dynamic-ns')
        check(False, 'the deleted namespace is gone')
    except NotFoundError:
        check(True, 'the deleted namespace is gone (404)')

    # Deployment CRUD, with a dynamic watch over it.
    rv = deployments.get(namespace=NAMESPACE).metadata.resourceVersion
    name = 'py-dynamic'
    body = {
        'apiVersion': 'apps/v1',
        'kind': 'Deployment',
        'metadata': {'name': name, 'labels': {'app': 'py-dynamic'}},
        'spec': {
            'replicas': 0,
            'selector': {'matchLabels': {'app': 'py-dynamic'}},
            'template': {
                'metadata': {'labels': {'app': 'py-dynamic'}},
                'spec': {'containers': [{'name': 'main', 'image': 'busybox', 'command': ['sleep', '3600']}]},
            },
        },
    }
    created = deployments.create(body=body, namespace=NAMESPACE)
    check(created.metadata.generation == 1, 'created at generation 1')
    check(created.spec.strategy.type == 'RollingUpdate', 'the server defaulted the strategy')
    listed = deployments.get(namespace=NAMESPACE, label_selector='app=py-dynamic')
    check([item.metadata.name for item in listed.items] == [name], 'list by label selector')
    patched = deployments.patch(name=name, namespace=NAMESPACE, body={'metadata': {'labels': {'step': 'patched'}}}, content_type='application/merge-patch+json')
    check(patched.metadata.labels['step'] == 'patched', 'merge patch')
    # Read, change, replace, and read again on a 409, as any client must: the Deployment
    # controller writes the object's status meanwhile.
    for attempt in range(20):
        current = deployments.get(name=name, namespace=NAMESPACE).to_dict()
        current['spec']['minReadySeconds'] = 3
        try:
            replaced = deployments.replace(body=current, namespace=NAMESPACE)
            break
        except ConflictError:
            time.sleep(0.1)
    else:
        check(False, 'a PUT from a fresh read succeeds within 20 tries')
    check(replaced.metadata.generation == 2 and replaced.spec.minReadySeconds == 3, 'PUT changes the spec, generation 2')
    try:
        deployments.replace(body=current, namespace=NAMESPACE)
        check(False, 'a PUT with a stale resourceVersion is refused')
    except ConflictError:
        check(True, 'a PUT with a stale resourceVersion is 409')
    scale = deployments.scale.get(name=name, namespace=NAMESPACE)
    check(scale.kind == 'Scale' and scale.spec.replicas == 0, 'the scale subresource: %s' % scale.to_dict())
    deployments.delete(name=name, namespace=NAMESPACE)
    try:
        deployments.get(name=name, namespace=NAMESPACE)
        check(False, 'the deleted deployment is gone')
    except NotFoundError:
        check(True, 'the deleted deployment is gone (404)')

    global EVENTS
    seen = []
    for event in dc.watch(deployments, namespace=NAMESPACE, resource_version=rv, timeout=CEILING_S):
        EVENTS += 1
        seen.append(event)
        if event['type'] == 'DELETED':
            break
    types = [e['type'] for e in seen]
    check(types[0] == 'ADDED' and types[-1] == 'DELETED' and 'MODIFIED' in types, 'a dynamic watch replays ADDED, MODIFIED, DELETED: %s' % types)
    check(seen[0]['object'].metadata.name == name, 'the dynamic watch carries ResourceInstances')
    print('ok: DynamicClient discovery, namespace and deployment CRUD, dynamic watch:', ', '.join(types))


def main():
    kubeconfig, workdir = sys.argv[1], sys.argv[2]
    started = time.monotonic()
    api_client = config.new_client_from_config(config_file=kubeconfig)
    core = client.CoreV1Api(api_client)
    coordination = client.CoordinationV1Api(api_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
    # The pods need the server's own node to be Ready.
    eventually(
        lambda: any(
            c.type == 'Ready' and c.status == 'True'
            for n in core.list_node().items
            for c in (n.status.conditions or [])
        ),
        'a Ready node',
    )
    test_node_watch(core)
    test_pod_watch(core)
    test_timeout_and_bookmarks(core, coordination)
    test_logs(core)
    test_dynamic(api_client, workdir)
    core.delete_namespace(NAMESPACE)
    print('PYTHON-SUMMARY ' + json.dumps({'checks': CHECKS, 'events': EVENTS, 'seconds': round(time.monotonic() - started, 1)}))


if __name__ == '__main__':
    main()
