"""
RBAC through the official Python client (Debian's python3-kubernetes), against a real server that
test/e2e/rbac.test.ts starts and prepares: each identity (a kubeconfig per user: a ServiceAccount
token, a client certificate) is bound by a Role that lets it read pods in namespace `a` only.

Listing pods in `a` works; in `b` it is an ApiException 403 whose Status carries
kube-apiserver's message; a SelfSubjectAccessReview (the client's create_self_subject_access_review)
agrees for both namespaces; a SelfSubjectReview names the user.

Usage: /usr/bin/python3 test/python/rbac_test.py USERNAME KUBECONFIG [USERNAME KUBECONFIG ...]
Every check raises on failure (exit 1 with a traceback); the last line on success is
`PYTHON-SUMMARY {"checks": N}`.
"""

import json
import sys

from kubernetes import client, config
from kubernetes.client.rest import ApiException

CHECKS = 0


def check(condition, what):
    global CHECKS
    CHECKS += 1
    if not condition:
        raise AssertionError(what)


def can_i(api, namespace):
    review = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
        resource_attributes=client.V1ResourceAttributes(namespace=namespace, verb='list', resource='pods')))
    return api.create_self_subject_access_review(review).status.allowed


def one_user(username, kubeconfig):
    api_client = config.new_client_from_config(config_file=kubeconfig)
    core = client.CoreV1Api(api_client)
    authorization = client.AuthorizationV1Api(api_client)

    pods = core.list_namespaced_pod('a')
    check(isinstance(pods.items, list), '%s lists pods in a' % username)

    try:
        core.list_namespaced_pod('b')
        raise AssertionError('%s listed pods in b' % username)
    except ApiException as error:
        check(error.status == 403, '%s: 403 in b, got %s' % (username, error.status))
        status = json.loads(error.body)
        expected = 'pods is forbidden: User "%s" cannot list resource "pods" in API group "" in the namespace "b"' % username
        check(status['message'] == expected, '%s: message %r' % (username, status['message']))
        check(status['reason'] == 'Forbidden' and status['details'] == {'kind': 'pods'}, '%s: status %r' % (username, status))

    check(can_i(authorization, 'a') is True, '%s: can-i in a' % username)
    check(can_i(authorization, 'b') is False, '%s: can-i in b' % username)

    # The client has no typed SelfSubjectReview call in every version: the generic one.
    whoami = api_client.call_api(
        '/apis/authentication.k8s.io/v1/selfsubjectreviews', 'POST',
        body={'apiVersion': 'authentication.k8s.io/v1', 'kind': 'SelfSubjectReview'},
        response_type='object', auth_settings=['BearerToken'], _return_http_data_only=True)
    check(whoami['status']['userInfo']['username'] == username, '%s: whoami %r' % (username, whoami))


def main(args):
    for i in range(0, len(args), 2):
        one_user(args[i], args[i + 1])
    print('PYTHON-SUMMARY ' + json.dumps({'checks': CHECKS}))


if __name__ == '__main__':
    main(sys.argv[1:])
