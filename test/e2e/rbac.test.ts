/**
 * RBAC end to end on a real `drover server`, with the real kubectl (1.32, which sends protobuf for
 * `create role|rolebinding|…`, `auth can-i` and `auth whoami`, and Debian's 1.20, which sends
 * JSON) and the official Python client. Two kinds of users, each bound by a Role that lets it read
 * pods in namespace `a` only: a ServiceAccount (a token from `kubectl create token`) and a user
 * with a client certificate issued with openssl from the cluster's client CA (CN=alice, O=team).
 * Each lists pods in `a`, gets kube-apiserver's 403 in `b`, and `kubectl auth can-i` agrees;
 * escalation is refused; an aggregated ClusterRole picks up a new labelled role.
 *
 * Run: node --import tsx --test test/e2e/rbac.test.ts
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import YAML from 'yaml';

import { kubectlClients, type KubectlResult, MODERN_KUBECTL, runKubectl } from '../helpers/kubectl.js';
import { runPythonClientScript } from '../helpers/python.js';
import { cleanup, eventually, request, type ServerProcess, startServer, tempDir } from '../helpers/server.js';

const SA_USER = 'system:serviceaccount:a:bot';
const CERT_USER = 'alice';
const SA_GROUPS = ['system:serviceaccounts', 'system:serviceaccounts:a', 'system:authenticated'];
/** The groups as kube's escalation message prints them (Go's %q of a slice). */
const SA_GROUPS_GO = `[${SA_GROUPS.map((g) => `"${g}"`).join(' ')}]`;

/** The 403 kube-apiserver answers for a list of pods in namespace b, as kubectl prints it. */
const forbiddenInB = (user: string): string =>
  `Error from server (Forbidden): pods is forbidden: User "${user}" cannot list resource "pods" in API group "" in the namespace "b"`;

function assertOk(result: KubectlResult, what: string): void {
  assert.equal(result.code, 0, `${what}: exit ${result.code}\n${result.stderr}`);
}

describe('RBAC on a real server: certificate users, ServiceAccounts, kubectl and the Python client', { concurrency: false }, () => {
  let server: ServerProcess;
  let work: string;
  let cache: string;
  let saToken: string;
  /** A kubeconfig per identity. */
  const kubeconfigs: Record<string, string> = {};

  const admin = (args: string[], input?: string): Promise<KubectlResult> =>
    runKubectl(MODERN_KUBECTL, server.kubeconfig, cache, args, input === undefined ? {} : { input });
  const adminOk = async (args: string[], input?: string): Promise<string> => {
    const result = await admin(args, input);
    assertOk(result, `admin: kubectl ${args.join(' ')}`);
    return result.stdout;
  };

  /** A kubeconfig for the server with the given user credentials (token, or certificate and key). */
  function writeKubeconfig(name: string, user: Record<string, string>): string {
    const file = path.join(work, `${name}.kubeconfig`);
    const doc = {
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'drover', cluster: { server: server.url, 'certificate-authority-data': Buffer.from(server.caPem).toString('base64') } }],
      users: [{ name, user }],
      contexts: [{ name, context: { cluster: 'drover', user: name } }],
      'current-context': name,
    };
    fs.writeFileSync(file, YAML.stringify(doc), { mode: 0o600 });
    return file;
  }

  /** A client certificate from the cluster's client CA, as an administrator could issue one with openssl. */
  function issueClientCertificate(commonName: string, organization: string): Record<string, string> {
    const tls = path.join(server.dataDir, 'server/tls');
    const openssl = (args: string[]): void => {
      const run = spawnSync('openssl', args, { cwd: work, encoding: 'utf8' });
      assert.equal(run.status, 0, `openssl ${args.join(' ')}: ${run.stderr}`);
    };
    fs.writeFileSync(path.join(work, 'client.ext'), 'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n');
    openssl(['req', '-new', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', 'user.key', '-subj', `/CN=${commonName}/O=${organization}`, '-out', 'user.csr']);
    openssl(['x509', '-req', '-in', 'user.csr', '-CA', path.join(tls, 'client-ca.crt'), '-CAkey', path.join(tls, 'client-ca.key'), '-set_serial', '4242', '-days', '1', '-extfile', 'client.ext', '-out', 'user.crt']);
    return {
      'client-certificate-data': fs.readFileSync(path.join(work, 'user.crt')).toString('base64'),
      'client-key-data': fs.readFileSync(path.join(work, 'user.key')).toString('base64'),
    };
  }

  before(async () => {
    // /metrics is served, so who may read it can be seen.
    server = await startServer({ args: ['--supervisor-metrics'] });
    work = tempDir('rbac');
    cache = path.join(work, 'kube-cache');
    await adminOk(['create', 'namespace', 'a']);
    await adminOk(['create', 'namespace', 'b']);
    await adminOk(['create', 'serviceaccount', 'bot', '-n', 'a']);
    // Both identities may read pods in a, nothing more (kubectl 1.32 sends these as protobuf).
    await adminOk(['create', 'role', 'pod-reader', '-n', 'a', '--verb=get,list,watch', '--resource=pods']);
    await adminOk(['create', 'rolebinding', 'readers', '-n', 'a', '--role=pod-reader', '--serviceaccount=a:bot', `--user=${CERT_USER}`]);
    saToken = (await adminOk(['create', 'token', 'bot', '-n', 'a'])).trim();
    kubeconfigs[SA_USER] = writeKubeconfig('bot', { token: saToken });
    kubeconfigs[CERT_USER] = writeKubeconfig(CERT_USER, issueClientCertificate(CERT_USER, 'team'));
  });

  after(async () => {
    await cleanup(work);
  });

  it('users bound by a Role list pods in a and get kube-apiserver\'s 403 in b, and nothing cluster-scoped (kubectl 1.32 and 1.20)', async () => {
    for (const client of kubectlClients()) {
      for (const [user, kubeconfig] of Object.entries(kubeconfigs)) {
        const inA = await eventually(async () => {
          const result = await runKubectl(client, kubeconfig, cache, ['get', 'pods', '-n', 'a']);
          return result.code === 0 ? result : undefined;
        }, `${client.name}: ${user} lists pods in a`);
        assert.match(inA.stderr, /No resources found in a namespace/);
        const inB = await runKubectl(client, kubeconfig, cache, ['get', 'pods', '-n', 'b']);
        assert.equal(inB.code, 1, `${client.name}: ${user} listed pods in b: ${inB.stdout}`);
        assert.equal(inB.stderr.trim(), forbiddenInB(user), `${client.name}: ${user}`);
        // Nor may they write in a, or read cluster-scoped objects.
        const nodes = await runKubectl(client, kubeconfig, cache, ['get', 'nodes']);
        assert.equal(nodes.stderr.trim(), `Error from server (Forbidden): nodes is forbidden: User "${user}" cannot list resource "nodes" in API group "" at the cluster scope`);
      }
    }
  });

  it('kubectl auth can-i agrees (yes in a, no in b), --list shows the Role\'s rule, and auth whoami names each user', async () => {
    for (const client of kubectlClients()) {
      for (const [user, kubeconfig] of Object.entries(kubeconfigs)) {
        const yes = await runKubectl(client, kubeconfig, cache, ['auth', 'can-i', 'list', 'pods', '-n', 'a']);
        assert.deepEqual([yes.code, yes.stdout.trim()], [0, 'yes'], `${client.name}: ${user} in a: ${yes.stderr}`);
        const no = await runKubectl(client, kubeconfig, cache, ['auth', 'can-i', 'list', 'pods', '-n', 'b']);
        assert.deepEqual([no.code, no.stdout.trim()], [1, 'no'], `${client.name}: ${user} in b: ${no.stderr}`);
        const del = await runKubectl(client, kubeconfig, cache, ['auth', 'can-i', 'delete', 'pods', '-n', 'a']);
        assert.equal(del.stdout.trim(), 'no', `${client.name}: ${user} may not delete`);
      }
    }
    // `--list` (kubectl 1.32 sends a SelfSubjectRulesReview as protobuf) shows the Role's rule.
    const list = await runKubectl(MODERN_KUBECTL, kubeconfigs[SA_USER]!, cache, ['auth', 'can-i', '--list', '-n', 'a']);
    assertOk(list, 'auth can-i --list');
    assert.match(list.stdout, /^pods\s+\[\]\s+\[\]\s+\[get list watch\]$/m);
    // whoami exists from kubectl 1.26 on: the modern client only.
    const whoSa = await runKubectl(MODERN_KUBECTL, kubeconfigs[SA_USER]!, cache, ['auth', 'whoami', '-o', 'json']);
    assertOk(whoSa, 'whoami (ServiceAccount)');
    const saInfo = (JSON.parse(whoSa.stdout) as { status: { userInfo: { username: string; groups: string[] } } }).status.userInfo;
    assert.equal(saInfo.username, SA_USER);
    assert.deepEqual(saInfo.groups, SA_GROUPS);
    const whoTable = await runKubectl(MODERN_KUBECTL, kubeconfigs[SA_USER]!, cache, ['auth', 'whoami']);
    assertOk(whoTable, 'whoami (table)');
    assert.match(whoTable.stdout, /^Username\s+system:serviceaccount:a:bot$/m);
    const whoCert = await runKubectl(MODERN_KUBECTL, kubeconfigs[CERT_USER]!, cache, ['auth', 'whoami']);
    assertOk(whoCert, 'whoami (certificate)');
    assert.match(whoCert.stdout, /^Username\s+alice$/m);
    assert.match(whoCert.stdout, /^Groups\s+\[team system:authenticated\]$/m);
  });

  it('discovery is open to every signed-in user, /metrics only to system:monitoring and the admin, and impersonation is refused rather than ignored', async () => {
    const apis = await request(server, 'GET', '/apis', { token: saToken });
    assert.equal(apis.status, 200, apis.text);
    const metrics = await request(server, 'GET', '/metrics', { token: saToken });
    assert.equal(metrics.status, 403, metrics.text);
    assert.deepEqual(metrics.json, {
      kind: 'Status',
      apiVersion: 'v1',
      metadata: {},
      status: 'Failure',
      message: `forbidden: User "${SA_USER}" cannot get path "/metrics"`,
      reason: 'Forbidden',
      details: {},
      code: 403,
    });
    assert.equal((await request(server, 'GET', '/metrics')).status, 200, 'the admin reads /metrics');
    // kubectl --as would otherwise be answered as the caller: `can-i --as` would lie.
    const as = await runKubectl(MODERN_KUBECTL, server.kubeconfig, cache, ['get', 'pods', '-n', 'b', '--as', 'someone']);
    assert.equal(as.code, 1, as.stdout);
    assert.match(as.stderr, /impersonation \(Impersonate-\* headers, kubectl --as\/--as-group\) is not supported by Drover/);
  });

  it('escalation is refused: a user who may write Roles but not delete pods cannot create a Role granting pod delete, nor bind edit', async () => {
    await adminOk(['create', 'role', 'role-writer', '-n', 'a', '--verb=create,get,list,update,patch', '--resource=roles,rolebindings']);
    await adminOk(['create', 'rolebinding', 'bot-writes-roles', '-n', 'a', '--role=role-writer', '--serviceaccount=a:bot']);
    const bot = kubeconfigs[SA_USER]!;
    // A Role within what it holds is fine, once the binding has reached the server's cache.
    await eventually(async () => (await runKubectl(MODERN_KUBECTL, bot, cache, ['create', 'role', 'reader-too', '-n', 'a', '--verb=get', '--resource=pods'])).code === 0, 'bot creates a role it holds');
    for (const client of kubectlClients()) {
      const refused = await runKubectl(client, bot, cache, ['create', 'role', `deleter-${client.legacy ? 'old' : 'new'}`, '-n', 'a', '--verb=delete', '--resource=pods']);
      assert.equal(refused.code, 1, `${client.name}: ${refused.stdout}`);
      assert.equal(
        refused.stderr.trim(),
        `Error from server (Forbidden): roles.rbac.authorization.k8s.io "deleter-${client.legacy ? 'old' : 'new'}" is forbidden: user "${SA_USER}" (groups=${SA_GROUPS_GO}) is attempting to grant RBAC permissions not currently held:\n` +
          '{APIGroups:[""], Resources:["pods"], Verbs:["delete"]}',
        client.name,
      );
      const bind = await runKubectl(client, bot, cache, ['create', 'rolebinding', 'bot-edits', '-n', 'a', '--clusterrole=edit', '--serviceaccount=a:bot']);
      assert.equal(bind.code, 1, `${client.name}: ${bind.stdout}`);
      // kubectl 1.32 prints this one as `error: failed to create rolebinding: <message>`.
      assert.match(bind.stderr, /^(Error from server \(Forbidden\)|error: failed to create rolebinding): rolebindings\.rbac\.authorization\.k8s\.io "bot-edits" is forbidden: user "system:serviceaccount:a:bot" .* is attempting to grant RBAC permissions not currently held:\n/);
    }
    assert.equal((await admin(['get', 'role', 'deleter-new', '-n', 'a'])).code, 1, 'nothing was stored');
    assert.equal((await runKubectl(MODERN_KUBECTL, bot, cache, ['auth', 'can-i', 'delete', 'pods', '-n', 'a'])).stdout.trim(), 'no');
  });

  it('an aggregated ClusterRole picks up a new labelled ClusterRole: view gains Secrets, and a user bound to view can then read them', async () => {
    await adminOk(['create', 'serviceaccount', 'viewer', '-n', 'b']);
    await adminOk(['create', 'rolebinding', 'viewers', '-n', 'b', '--clusterrole=view', '--serviceaccount=b:viewer']);
    const viewer = writeKubeconfig('viewer', { token: (await adminOk(['create', 'token', 'viewer', '-n', 'b'])).trim() });
    await eventually(async () => (await runKubectl(MODERN_KUBECTL, viewer, cache, ['get', 'pods', '-n', 'b'])).code === 0, 'viewer reads pods through view');
    const before = await runKubectl(MODERN_KUBECTL, viewer, cache, ['get', 'secrets', '-n', 'b']);
    assert.match(before.stderr, /secrets is forbidden: User "system:serviceaccount:b:viewer" cannot list resource "secrets"/, 'view has no Secrets');
    await adminOk(['apply', '-f', '-'], YAML.stringify({
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name: 'secret-reader', labels: { 'rbac.authorization.k8s.io/aggregate-to-view': 'true' } },
      rules: [{ apiGroups: [''], resources: ['secrets'], verbs: ['get', 'list'] }],
    }));
    await eventually(async () => (await runKubectl(MODERN_KUBECTL, viewer, cache, ['get', 'secrets', '-n', 'b'])).code === 0, 'viewer reads Secrets once view aggregates secret-reader');
    const view = JSON.parse(await adminOk(['get', 'clusterrole', 'view', '-o', 'json'])) as { rules: Array<{ resources?: string[] }> };
    assert.ok(view.rules.some((rule) => rule.resources?.includes('secrets')), 'the rule is in view itself');
    // edit and admin aggregate view's rules in turn.
    for (const role of ['edit', 'admin']) {
      await eventually(async () => {
        const stored = JSON.parse(await adminOk(['get', 'clusterrole', role, '-o', 'json'])) as { rules: Array<{ resources?: string[] }> };
        return stored.rules.some((rule) => rule.resources?.includes('secrets') && rule.resources.length === 1);
      }, `${role} aggregates secret-reader`);
    }
  });

  it('the admin writes the four kinds with kubectl (protobuf from 1.32, JSON from 1.20) and reads them back as tables', async () => {
    for (const client of kubectlClients()) {
      const suffix = client.legacy ? '-old' : '-new';
      const run = async (args: string[]): Promise<void> => assertOk(await runKubectl(client, server.kubeconfig, cache, args), `${client.name}: ${args.join(' ')}`);
      await run(['create', 'clusterrole', `pod-watcher${suffix}`, '--verb=watch', '--resource=pods']);
      await run(['create', 'clusterrolebinding', `pod-watchers${suffix}`, `--clusterrole=pod-watcher${suffix}`, '--group=team', '--serviceaccount=a:bot']);
      await run(['create', 'role', `r${suffix}`, '-n', 'b', '--verb=get', '--resource=configmaps', '--resource-name=settings']);
      await run(['create', 'rolebinding', `rb${suffix}`, '-n', 'b', `--role=r${suffix}`, '--user=carol']);
    }
    const wide = await adminOk(['get', 'clusterrolebinding', 'pod-watchers-new', '-o', 'wide']);
    assert.match(wide, /^NAME\s+ROLE\s+AGE\s+USERS\s+GROUPS\s+SERVICEACCOUNTS$/m);
    assert.match(wide, /^pod-watchers-new\s+ClusterRole\/pod-watcher-new\s+\S+\s+team\s+a\/bot$/m);
    const roles = await adminOk(['get', 'roles', '-n', 'b']);
    assert.match(roles, /^NAME\s+CREATED AT$/m);
    assert.match(roles, /^r-old\s+\d{4}-\d\d-\d\dT/m);
    // roleRef cannot change, as kube-apiserver says.
    const changed = await admin(['patch', 'rolebinding', 'rb-new', '-n', 'b', '--type=merge', '-p', '{"roleRef":{"name":"r-old"}}']);
    assert.equal(changed.code, 1);
    assert.match(changed.stderr, /The RoleBinding "rb-new" is invalid: roleRef: Invalid value: rbac\.RoleRef\{APIGroup:"rbac\.authorization\.k8s\.io", Kind:"Role", Name:"r-old"\}: cannot change roleRef/);
  });

  it('the official Python client: pods in a, the 403 in b with its message, SelfSubjectAccessReview and SelfSubjectReview (test/python/rbac_test.py)', async () => {
    const { summary, output } = await runPythonClientScript('rbac_test.py', Object.entries(kubeconfigs).flat());
    assert.equal(summary.checks, 7 * Object.keys(kubeconfigs).length, output);
  });
});
