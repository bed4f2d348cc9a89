"""
ServiceAccounts through the official Python client (Debian's python3-kubernetes), against a real
server that test/e2e/service-accounts.test.ts starts.

The `default` account appears in a new namespace; an account created with automount off reads
back; a TokenRequest (create_namespaced_service_account_token) returns a JWT whose claims name
the account, which a second client authenticates with (403 until a RoleBinding to `view`, then
allowed); a 599 s request is a 422 naming spec.expirationSeconds; once the account is deleted,
its token gets 401.

Usage: /usr/bin/python3 test/python/service_accounts_test.py KUBECONFIG
Every check raises on failure (exit 1 with a traceback); the last line on success is
`PYTHON-SUMMARY {"checks": N}`.
"""

import base64
import json
import sys
import time

from kubernetes import client, config
from kubernetes.client.rest import ApiException

CHECKS = 0
NAMESPACE = 'py-accounts'
CEILING_SECONDS = 60


def check(condition, what):
    global CHECKS
    CHECKS += 1
    if not condition:
        raise AssertionError(what)


def claims_of(token):
    payload = token.split('.')[1]
    return json.loads(base64.urlsafe_b64decode(payload + '=' * (-len(payload) % 4)))


def refusal(call, *args, **kwargs):
    """The ApiException a call raises."""
    try:
        call(*args, **kwargs)
    except ApiException as error:
        return error
    raise AssertionError('expected %s to be refused' % call.__name__)


def client_with_token(base, token):
    """A CoreV1Api that authenticates with `token` instead of the kubeconfig's credential."""
    configuration = client.Configuration()
    configuration.host = base.host
    configuration.ssl_ca_cert = base.ssl_ca_cert
    configuration.api_key = {'authorization': token}
    configuration.api_key_prefix = {'authorization': 'Bearer'}
    return client.CoreV1Api(client.ApiClient(configuration))


def main(kubeconfig):
    config.load_kube_config(config_file=kubeconfig)
    base = client.Configuration.get_default_copy()
    core = client.CoreV1Api()
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))

    # The controller creates `default` in the new namespace.
    deadline = time.time() + CEILING_SECONDS
    default = None
    while default is None:
        try:
            default = core.read_namespaced_service_account('default', NAMESPACE)
        except ApiException as error:
            check(error.status == 404, 'reading default: %s' % error)
            if time.time() > deadline:
                raise AssertionError('no default service account in %s after %ss' % (NAMESPACE, CEILING_SECONDS))
            time.sleep(0.2)
    check(default.metadata.uid, 'default has a uid')
    names = [sa.metadata.name for sa in core.list_namespaced_service_account(NAMESPACE).items]
    check(names == ['default'], 'listed: %s' % names)

    created = core.create_namespaced_service_account(NAMESPACE, client.V1ServiceAccount(
        metadata=client.V1ObjectMeta(name='reporter'),
        automount_service_account_token=False,
        image_pull_secrets=[client.V1LocalObjectReference(name='registry')],
    ))
    read = core.read_namespaced_service_account('reporter', NAMESPACE)
    check(read.metadata.uid == created.metadata.uid, 'read back the same account')
    check(read.automount_service_account_token is False, 'automount off kept')
    check([r.name for r in read.image_pull_secrets] == ['registry'], 'image pull secrets kept')

    # A TokenRequest: the JWT names the account; another client authenticates with it.
    answer = core.create_namespaced_service_account_token('reporter', NAMESPACE, client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=1200),
    ))
    token = answer.status.token
    claims = claims_of(token)
    check(claims['sub'] == 'system:serviceaccount:%s:reporter' % NAMESPACE, 'sub: %s' % claims['sub'])
    check(claims['kubernetes.io']['serviceaccount']['uid'] == created.metadata.uid, 'the account UID is in the token')
    check(claims['exp'] - claims['iat'] == 1200, 'lifetime as asked')
    check(answer.spec.expiration_seconds == 1200, 'spec echoed')
    check(answer.status.expiration_timestamp is not None, 'expiration timestamp')
    as_reporter = client_with_token(base, token)
    error = refusal(as_reporter.list_namespaced_pod, NAMESPACE)
    check(error.status == 403, 'authenticated but not allowed yet: %s' % error.status)
    check('system:serviceaccount:%s:reporter' % NAMESPACE in json.loads(error.body)['message'], 'the 403 names the account')

    # Allowed once bound to view in its namespace (RBAC follows bindings through a cache: poll).
    client.RbacAuthorizationV1Api().create_namespaced_role_binding(NAMESPACE, client.V1RoleBinding(
        metadata=client.V1ObjectMeta(name='reporter-view'),
        role_ref=client.V1RoleRef(api_group='rbac.authorization.k8s.io', kind='ClusterRole', name='view'),
        subjects=[client.V1Subject(kind='ServiceAccount', name='reporter', namespace=NAMESPACE)],
    ))
    deadline = time.time() + CEILING_SECONDS
    while True:
        try:
            pods = as_reporter.list_namespaced_pod(NAMESPACE)
            break
        except ApiException as error:
            check(error.status == 403, 'only 403 while the binding is on its way: %s' % error.status)
            if time.time() > deadline:
                raise AssertionError('the RoleBinding did not take effect in %ss' % CEILING_SECONDS)
            time.sleep(0.2)
    check(pods.items == [], 'the token lists pods once bound to view')

    error = refusal(core.create_namespaced_service_account_token, 'reporter', NAMESPACE,
                    client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=599)))
    status = json.loads(error.body)
    check(error.status == 422, 'a 599 s token is refused: %s' % error.status)
    check([c.get('field') for c in status['details']['causes']] == ['spec.expirationSeconds'], 'names the field: %s' % status)

    # The account deleted: its token is refused from then on.
    core.delete_namespaced_service_account('reporter', NAMESPACE)
    error = refusal(as_reporter.list_namespaced_pod, NAMESPACE)
    check(error.status == 401, 'the deleted account’s token gets 401, not %s' % error.status)

    core.delete_namespace(NAMESPACE)
    print('PYTHON-SUMMARY %s' % json.dumps({'checks': CHECKS}))


if __name__ == '__main__':
    main(sys.argv[1])
