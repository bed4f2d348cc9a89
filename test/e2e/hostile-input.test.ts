/**
 * Malformed and hostile requests against a real `drover server`: each one gets a 4xx `Status`
 * with a message that says what is wrong (or, where kube-apiserver accepts the input, the same
 * answer it gives), and none leaves an error or a stack trace in the server's log.
 * docs/security.md ("Hostile input") lists every case by its test name. Slow clients and watch
 * limits are in hostile-connections.test.ts.
 *
 * Run: node --import tsx --test test/e2e/hostile-input.test.ts
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { decodeKubernetesProtobuf } from '../../src/apiserver/protobuf.js';
import { ApiError } from '../../src/apiserver/errors.js';
import { connectTls, expectQuietLog, expectStatusBody, rawExchange } from '../helpers/hostile.js';
import { cleanup, eventually, request, type RequestOptions, type ServerProcess, startServer } from '../helpers/server.js';

const LEASES = '/apis/coordination.k8s.io/v1/namespaces/default/leases';
const ALL_LEASES = '/apis/coordination.k8s.io/v1/leases';
const PODS = '/api/v1/namespaces/default/pods';
const DEPLOYMENTS = '/apis/apps/v1/namespaces/default/deployments';
const YAML = { 'Content-Type': 'application/yaml' };
const PROTOBUF = { 'Content-Type': 'application/vnd.kubernetes.protobuf' };
const JSON_PATCH = { 'Content-Type': 'application/json-patch+json' };
const MERGE = { 'Content-Type': 'application/merge-patch+json' };
const STRATEGIC = { 'Content-Type': 'application/strategic-merge-patch+json' };

const container = { name: 'c', image: 'busybox', command: ['sleep', '3600'] };
const podSpec = (extra: Record<string, unknown> = {}): Record<string, unknown> => ({ containers: [container], ...extra });
const deployment = (name: string, replicas: unknown): Record<string, unknown> => ({
  metadata: { name },
  spec: { replicas, selector: { matchLabels: { app: name } }, template: { metadata: { labels: { app: name } }, spec: podSpec() } },
});
const continueToken = (token: unknown): string => Buffer.from(JSON.stringify(token)).toString('base64url');
const deep = (depth: number, open = '[', close = ']'): string => open.repeat(depth) + close.repeat(depth);

interface HostileCase {
  name: string;
  method: string;
  path: string;
  options?: RequestOptions;
  /** Sent over a raw TLS connection instead (requests Node's client would not send). */
  raw?: string;
  code: number;
  reason?: string;
  message?: RegExp;
  /** Extra checks on the answer. */
  check?: (body: Record<string, any>) => void;
}

/** The join secret of the server's token, for the registration endpoint. */
let joinSecret = '';

const CASES: HostileCase[] = [
  // --- bodies ---------------------------------------------------------------------------------
  { name: 'malformed JSON body', method: 'POST', path: LEASES, options: { rawBody: '{"metadata":' }, code: 400, reason: 'BadRequest', message: /error decoding JSON request body/ },
  { name: 'JSON body that is an array', method: 'POST', path: LEASES, options: { rawBody: '[]' }, code: 400, reason: 'BadRequest', message: /must be a JSON object/ },
  { name: 'JSON body that is null', method: 'POST', path: LEASES, options: { rawBody: 'null' }, code: 400, reason: 'BadRequest', message: /must be a JSON object/ },
  { name: 'empty body', method: 'POST', path: LEASES, options: { rawBody: '' }, code: 400, reason: 'BadRequest', message: /Unexpected end of JSON input/ },
  { name: 'metadata that is not an object', method: 'POST', path: LEASES, options: { body: { metadata: 'x' } }, code: 400, reason: 'BadRequest', message: /metadata must be an object/ },
  { name: 'JSON nested 100000 deep', method: 'POST', path: PODS, options: { rawBody: `{"metadata":{"name":"deep"},"spec":{"x":${deep(100_000)}}}` }, code: 400, reason: 'BadRequest', message: /nested deeper than 100 levels \(at spec\.x\[0\]/ },
  { name: 'number out of range (1e400)', method: 'POST', path: LEASES, options: { rawBody: '{"metadata":{"name":"inf"},"spec":{"leaseDurationSeconds":1e400}}' }, code: 400, reason: 'BadRequest', message: /number out of range at spec\.leaseDurationSeconds/ },
  { name: 'body over 3 MiB', method: 'POST', path: LEASES, options: { body: { metadata: { name: 'big' }, spec: { holderIdentity: 'x'.repeat(4_000_000) } } }, code: 413, reason: 'RequestEntityTooLarge', message: /larger than the limit of 3145728 bytes/ },
  { name: 'object over 1.5 MiB', method: 'POST', path: LEASES, options: { body: { metadata: { name: 'huge' }, spec: { holderIdentity: 'x'.repeat(2_000_000) } } }, code: 413, reason: 'RequestEntityTooLarge', message: /Lease "huge" is too large to store: \d+ bytes, the limit is 1572864 bytes/ },
  { name: 'unsupported Content-Type', method: 'POST', path: LEASES, options: { rawBody: '<lease/>', headers: { 'Content-Type': 'application/xml' } }, code: 415, reason: 'UnsupportedMediaType', message: /unknown format.*application\/xml/ },
  { name: 'protobuf body without the magic', method: 'POST', path: LEASES, options: { rawBody: Buffer.from([1, 2, 3, 4, 5]), headers: PROTOBUF }, code: 400, reason: 'BadRequest', message: /protobuf magic/ },
  { name: 'protobuf garbage after the magic', method: 'POST', path: LEASES, options: { rawBody: Buffer.concat([Buffer.from('k8s\0', 'binary'), Buffer.alloc(11, 0xff)]), headers: PROTOBUF }, code: 400, reason: 'BadRequest', message: /error decoding protobuf request body: varint longer than 10 bytes/ },
  { name: 'duplicate keys with fieldValidation=Strict', method: 'POST', path: `${LEASES}?fieldValidation=Strict`, options: { rawBody: '{"metadata":{"name":"dup-strict"},"spec":{"holderIdentity":"a","holderIdentity":"b"}}' }, code: 400, reason: 'BadRequest', message: /strict decoding error: duplicate field "holderIdentity"/ },
  {
    name: 'duplicate keys by default: the last wins, as in kube-apiserver',
    method: 'POST',
    path: LEASES,
    options: { rawBody: '{"metadata":{"name":"dup"},"spec":{"holderIdentity":"a","holderIdentity":"b"}}' },
    code: 201,
    check: (lease) => assert.equal(lease.spec.holderIdentity, 'b'),
  },
  { name: 'unknown field with fieldValidation=Strict', method: 'POST', path: `${LEASES}?fieldValidation=Strict`, options: { body: { metadata: { name: 'unknown' }, bogus: 1 } }, code: 400, reason: 'BadRequest', message: /unknown field "bogus"/ },
  { name: 'fieldValidation=Foo', method: 'POST', path: `${LEASES}?fieldValidation=Foo`, options: { body: { metadata: { name: 'fv' } } }, code: 400, reason: 'BadRequest', message: /fieldValidation parameter must be one of/ },
  // --- YAML -------------------------------------------------------------------------------------
  {
    name: 'YAML alias bomb',
    method: 'POST',
    path: LEASES,
    options: {
      headers: YAML,
      rawBody: `a: &a [x,x,x,x,x,x,x,x,x]\n${['b', 'c', 'd', 'e', 'f', 'g'].map((k, i) => `${k}: &${k} [${Array(9).fill(`*${'abcdef'[i]}`).join(',')}]`).join('\n')}\nmetadata: {name: bomb}\n`,
    },
    code: 400,
    reason: 'BadRequest',
    message: /Excessive alias count/,
  },
  { name: 'YAML nested 5000 deep', method: 'POST', path: LEASES, options: { headers: YAML, rawBody: `metadata: {name: yd}\nspec: ${deep(5000)}\n` }, code: 400, reason: 'BadRequest', message: /nested deeper than 100 levels/ },
  { name: 'YAML of more than 20000 tokens', method: 'POST', path: LEASES, options: { headers: YAML, rawBody: `metadata: {name: ym}\nspec:\n${Array.from({ length: 4000 }, (_, i) => `  k${i}: v`).join('\n')}\n` }, code: 400, reason: 'BadRequest', message: /more than 20000 tokens/ },
  { name: 'YAML duplicate key', method: 'POST', path: LEASES, options: { headers: YAML, rawBody: 'metadata: {name: ydup}\nspec:\n  holderIdentity: a\n  holderIdentity: b\n' }, code: 400, reason: 'BadRequest', message: /mapping key "holderIdentity" already defined \(at line 4\)/ },
  { name: 'YAML key that is a collection', method: 'POST', path: LEASES, options: { headers: YAML, rawBody: 'metadata: {name: ck}\nspec:\n  ? [a, b]\n  : c\n' }, code: 400, reason: 'BadRequest', message: /mapping key must be a string, number or boolean/ },
  { name: 'YAML !!binary value', method: 'POST', path: LEASES, options: { headers: YAML, rawBody: 'metadata: {name: bin}\nspec: !!binary aGVsbG8=\n' }, code: 400, reason: 'BadRequest', message: /not JSON \(\w+\) at spec/ },
  { name: 'YAML .nan', method: 'POST', path: LEASES, options: { headers: YAML, rawBody: 'metadata: {name: nan}\nspec: {leaseDurationSeconds: .nan}\n' }, code: 400, reason: 'BadRequest', message: /number out of range at spec\.leaseDurationSeconds/ },
  { name: 'YAML with two documents', method: 'POST', path: LEASES, options: { headers: YAML, rawBody: 'metadata: {name: y1}\n---\nmetadata: {name: y2}\n' }, code: 400, reason: 'BadRequest', message: /multiple documents/ },
  // --- names and paths --------------------------------------------------------------------------
  {
    name: 'invalid name',
    method: 'POST',
    path: LEASES,
    options: { body: { metadata: { name: 'Bad_Name' } } },
    code: 422,
    reason: 'Invalid',
    message: /metadata\.name: Invalid value: "Bad_Name"/,
    check: (status) => assert.equal(status.details.causes[0].field, 'metadata.name'),
  },
  { name: 'name over 253 characters', method: 'POST', path: LEASES, options: { body: { metadata: { name: 'a'.repeat(300) } } }, code: 422, reason: 'Invalid', message: /must be no more than 253 characters/ },
  { name: 'unicode name', method: 'POST', path: LEASES, options: { body: { metadata: { name: 'é☃' } } }, code: 422, reason: 'Invalid', message: /RFC 1123 subdomain/ },
  { name: 'name that is a number', method: 'POST', path: LEASES, options: { body: { metadata: { name: 5 } } }, code: 422, reason: 'Invalid', message: /name or generateName is required/ },
  { name: 'namespace in the URL that is not a namespace', method: 'POST', path: `/apis/coordination.k8s.io/v1/namespaces/${'Bad_NS'.repeat(20)}/leases`, options: { body: { metadata: { name: 'x' } } }, code: 404, reason: 'NotFound', message: /namespaces "(Bad_NS)+" not found/ },
  { name: 'encoded slash in a name', method: 'GET', path: `${LEASES}/a%2Fb`, code: 400, reason: 'BadRequest', message: /invalid name "a\/b" in the request path: may not contain '\/'/ },
  { name: 'encoded slash in a namespace', method: 'POST', path: '/apis/coordination.k8s.io/v1/namespaces/default%2Fx/leases', options: { body: { metadata: { name: 'x' } } }, code: 400, reason: 'BadRequest', message: /invalid namespace "default\/x"/ },
  { name: 'malformed percent-encoding', method: 'GET', path: `${LEASES}/%E0%A4%A`, code: 400, reason: 'BadRequest', message: /invalid percent-encoding in the request path segment "%E0%A4%A"/ },
  { name: 'dot segments in the path are resolved first, as in a URL', method: 'GET', path: '/api/v1/../../../etc/passwd', code: 404, reason: 'NotFound', message: /the server could not find the requested resource/ },
  { name: 'request target //', method: 'GET', path: '//', code: 400, reason: 'BadRequest', message: /invalid request target "\/\/"/ },
  // --- HTTP ---------------------------------------------------------------------------------------
  { name: 'URL over 16 KiB', method: 'GET', path: `${LEASES}/${'a'.repeat(20_000)}`, code: 431, reason: 'BadRequest', message: /larger than the limit of 16384 bytes/ },
  { name: 'headers over 16 KiB', method: 'GET', path: LEASES, options: { headers: { 'X-Big': 'x'.repeat(20_000) } }, code: 431, reason: 'BadRequest', message: /larger than the limit of 16384 bytes/ },
  { name: 'unknown HTTP method', method: 'FOO', path: LEASES, code: 400, reason: 'BadRequest', message: /malformed HTTP request \(HPE_INVALID_METHOD\)/ },
  { name: 'bytes that are not HTTP', method: 'RAW', path: '', raw: '\u0000\u0001\u0002 garbage \r\n\r\n', code: 400, reason: 'BadRequest', message: /malformed HTTP request/ },
  { name: 'Authorization: Basic', method: 'GET', path: LEASES, options: { token: null, headers: { Authorization: 'Basic Zm9vOmJhcg==' } }, code: 401, reason: 'Unauthorized', message: /Unauthorized/ },
  { name: 'empty bearer token', method: 'GET', path: LEASES, options: { token: null, headers: { Authorization: 'Bearer ' } }, code: 401, reason: 'Unauthorized', message: /Unauthorized/ },
  { name: 'bearer token of 10000 characters', method: 'GET', path: LEASES, options: { token: 'x'.repeat(10_000) }, code: 401, reason: 'Unauthorized', message: /Unauthorized/ },
  { name: 'Accept: text/html', method: 'GET', path: LEASES, options: { headers: { Accept: 'text/html' } }, code: 406, reason: 'NotAcceptable', message: /asked for text\/html/ },
  // --- query parameters ---------------------------------------------------------------------------
  { name: 'label selector with an unterminated set', method: 'GET', path: `${ALL_LEASES}?labelSelector=${encodeURIComponent('a in (b')}`, code: 400, reason: 'BadRequest', message: /invalid label selector "a in \(b": unterminated set/ },
  { name: 'label selector "!!!"', method: 'GET', path: `${ALL_LEASES}?labelSelector=!!!`, code: 400, reason: 'BadRequest', message: /missing key after "!"/ },
  { name: 'field selector without an operator', method: 'GET', path: `${ALL_LEASES}?fieldSelector=foo`, code: 400, reason: 'BadRequest', message: /can't understand 'foo'/ },
  { name: 'field selector on an unsupported field', method: 'GET', path: `${ALL_LEASES}?fieldSelector=spec.x%3D1`, code: 400, reason: 'BadRequest', message: /field label not supported: spec\.x/ },
  { name: 'limit=-1', method: 'GET', path: `${ALL_LEASES}?limit=-1`, code: 400, reason: 'BadRequest', message: /invalid limit "-1": must be between 0 and 9007199254740991/ },
  { name: 'limit=abc', method: 'GET', path: `${ALL_LEASES}?limit=abc`, code: 400, reason: 'BadRequest', message: /invalid limit "abc": must be an integer/ },
  { name: 'limit beyond 2^53', method: 'GET', path: `${ALL_LEASES}?limit=100000000000000000000`, code: 400, reason: 'BadRequest', message: /invalid limit "100000000000000000000": must be between/ },
  {
    name: 'unknown query parameter: ignored, as kube-apiserver',
    method: 'GET',
    path: `${LEASES}?bogus=%00%ff&limit=1`,
    code: 200,
    check: (list) => assert.equal(list.kind, 'LeaseList'),
  },
  { name: 'continue token that is garbage', method: 'GET', path: `${ALL_LEASES}?limit=1&continue=garbage`, code: 400, reason: 'BadRequest', message: /invalid continue token/ },
  { name: 'continue token with a revision from the future', method: 'GET', path: `${ALL_LEASES}?limit=1&continue=${continueToken({ v: 'meta.k8s.io/v1', rv: 1e15, start: '/registry/coordination.k8s.io/leases/default/a' })}`, code: 400, reason: 'BadRequest', message: /invalid continue token/ },
  { name: "continue token with another list's key", method: 'GET', path: `${LEASES}?limit=1&continue=${continueToken({ v: 'meta.k8s.io/v1', rv: 2, start: '/registry/core/pods/default/a' })}`, code: 400, reason: 'BadRequest', message: /invalid continue token: it was not produced by this server for this list/ },
  { name: 'resourceVersion=abc on a list', method: 'GET', path: `${ALL_LEASES}?resourceVersion=abc`, code: 400, reason: 'BadRequest', message: /invalid resource version "abc"/ },
  { name: 'resourceVersionMatch=Foo', method: 'GET', path: `${ALL_LEASES}?resourceVersion=1&resourceVersionMatch=Foo`, code: 400, reason: 'BadRequest', message: /invalid resourceVersionMatch "Foo"/ },
  { name: 'resourceVersion from the future with Exact: 504, as kube-apiserver', method: 'GET', path: `${ALL_LEASES}?resourceVersion=999999999&resourceVersionMatch=Exact`, code: 504, reason: 'Timeout', message: /Too large resource version: 999999999/ },
  { name: 'watch with resourceVersion=abc', method: 'GET', path: `${ALL_LEASES}?watch=1&resourceVersion=abc`, code: 400, reason: 'BadRequest', message: /invalid resource version "abc"/ },
  { name: 'watch with a resourceVersion beyond 2^53', method: 'GET', path: `${ALL_LEASES}?watch=1&resourceVersion=99999999999999999999`, code: 400, reason: 'BadRequest', message: /invalid resource version "99999999999999999999"/ },
  { name: 'watch with timeoutSeconds=abc', method: 'GET', path: `${ALL_LEASES}?watch=1&timeoutSeconds=abc`, code: 400, reason: 'BadRequest', message: /invalid timeoutSeconds "abc": must be an integer/ },
  { name: 'watch with timeoutSeconds=-1', method: 'GET', path: `${ALL_LEASES}?watch=1&timeoutSeconds=-1`, code: 400, reason: 'BadRequest', message: /invalid timeoutSeconds "-1": must be between 0 and 2147483647/ },
  { name: 'watch with timeoutSeconds beyond int32', method: 'GET', path: `${ALL_LEASES}?watch=1&timeoutSeconds=99999999999`, code: 400, reason: 'BadRequest', message: /must be between 0 and 2147483647/ },
  { name: 'gracePeriodSeconds=abc', method: 'DELETE', path: `${LEASES}/target?gracePeriodSeconds=abc`, code: 400, reason: 'BadRequest', message: /invalid gracePeriodSeconds "abc": must be an integer/ },
  { name: 'gracePeriodSeconds beyond int32', method: 'DELETE', path: `${PODS}/bound?gracePeriodSeconds=99999999999999`, code: 400, reason: 'BadRequest', message: /invalid gracePeriodSeconds "99999999999999": must be between/ },
  { name: 'DeleteOptions body that is malformed', method: 'DELETE', path: `${LEASES}/target`, options: { rawBody: '{"gracePeriodSeconds":' }, code: 400, reason: 'BadRequest', message: /error decoding JSON request body/ },
  { name: 'dryRun=Foo', method: 'POST', path: `${LEASES}?dryRun=Foo`, options: { body: { metadata: { name: 'dry' } } }, code: 422, reason: 'Invalid', message: /CreateOptions\.meta\.k8s\.io "" is invalid: dryRun\[0\]: Unsupported value: "Foo": supported values: "All"/ },
  { name: 'fieldManager over 128 characters', method: 'POST', path: `${LEASES}?fieldManager=${'m'.repeat(129)}`, options: { body: { metadata: { name: 'fm' } } }, code: 422, reason: 'Invalid', message: /fieldManager: Too long: may not be more than 128 bytes/ },
  { name: 'fieldManager with control characters', method: 'PATCH', path: `${LEASES}/target?fieldManager=a%07b`, options: { rawBody: '{}', headers: MERGE }, code: 422, reason: 'Invalid', message: /PatchOptions\.meta\.k8s\.io "" is invalid: fieldManager: .*printable characters/ },
  { name: 'pods/log with tailLines=-5', method: 'GET', path: `${PODS}/bound/log?tailLines=-5`, code: 400, reason: 'BadRequest', message: /tailLines must be an integer of at least 0/ },
  // --- numbers in objects ---------------------------------------------------------------------------
  { name: 'replicas=-1', method: 'POST', path: DEPLOYMENTS, options: { body: deployment('neg', -1) }, code: 422, reason: 'Invalid', message: /spec\.replicas: Invalid value: -1: must be greater than or equal to 0/ },
  { name: 'replicas beyond int32', method: 'POST', path: DEPLOYMENTS, options: { body: deployment('huge', 3_000_000_000) }, code: 422, reason: 'Invalid', message: /spec\.replicas: Invalid value: 3000000000: must be less than or equal to 2147483647/ },
  { name: 'replicas="x" through /scale', method: 'PUT', path: `${DEPLOYMENTS}/web/scale`, options: { body: { spec: { replicas: 'x' } } }, code: 422, reason: 'Invalid', message: /spec\.replicas: Invalid value: "x": must be an integer/ },
  { name: 'terminationGracePeriodSeconds=1e300', method: 'POST', path: PODS, options: { body: { metadata: { name: 'tg' }, spec: podSpec({ terminationGracePeriodSeconds: 1e300 }) } }, code: 422, reason: 'Invalid', message: /terminationGracePeriodSeconds: Invalid value: 1e\+300: must be less than or equal to 2147483647/ },
  { name: 'terminationGracePeriodSeconds=-5', method: 'POST', path: PODS, options: { body: { metadata: { name: 'tg' }, spec: podSpec({ terminationGracePeriodSeconds: -5 }) } }, code: 422, reason: 'Invalid', message: /terminationGracePeriodSeconds: must be greater than or equal to 0/ },
  // --- patches ------------------------------------------------------------------------------------------
  { name: 'JSON patch with an unknown op', method: 'PATCH', path: `${LEASES}/target`, options: { rawBody: '[{"op":"explode","path":"/spec"}]', headers: JSON_PATCH }, code: 422, reason: 'Invalid', message: /unknown op "explode"/ },
  { name: 'JSON patch that is not an array', method: 'PATCH', path: `${LEASES}/target`, options: { rawBody: '{"op":"add"}', headers: JSON_PATCH }, code: 400, reason: 'BadRequest', message: /must be a JSON array of operations/ },
  { name: 'JSON patch path without a leading /', method: 'PATCH', path: `${LEASES}/target`, options: { rawBody: '[{"op":"add","path":"spec","value":1}]', headers: JSON_PATCH }, code: 422, reason: 'Invalid', message: /path must be a JSON pointer/ },
  { name: 'JSON patch into __proto__', method: 'PATCH', path: `${LEASES}/target`, options: { rawBody: '[{"op":"add","path":"/__proto__/x","value":1}]', headers: JSON_PATCH }, code: 422, reason: 'Invalid', message: /\/__proto__\/x is not allowed/ },
  { name: 'merge patch that is malformed', method: 'PATCH', path: `${LEASES}/target`, options: { rawBody: '{"spec":', headers: MERGE }, code: 400, reason: 'BadRequest', message: /error decoding patch/ },
  { name: 'merge patch that is an array', method: 'PATCH', path: `${LEASES}/target`, options: { rawBody: '[1]', headers: MERGE }, code: 400, reason: 'BadRequest', message: /the patched object must be a JSON object/ },
  { name: 'merge patch nested 50000 deep', method: 'PATCH', path: `${LEASES}/target`, options: { rawBody: `{"spec":${'{"a":'.repeat(50_000)}1${'}'.repeat(50_000)}}`, headers: MERGE }, code: 400, reason: 'BadRequest', message: /the patch is nested deeper than 100 levels \(at spec\.a\.a/ },
  { name: 'merge patch with duplicate keys, Strict', method: 'PATCH', path: `${LEASES}/target?fieldValidation=Strict`, options: { rawBody: '{"spec":{"holderIdentity":"a","holderIdentity":"b"}}', headers: MERGE }, code: 400, reason: 'BadRequest', message: /duplicate field "holderIdentity"/ },
  { name: 'strategic merge patch: list element without its merge key', method: 'PATCH', path: `${PODS}/bound`, options: { rawBody: '{"spec":{"containers":[{"image":"x"}]}}', headers: STRATEGIC }, code: 400, reason: 'BadRequest', message: /lacks its merge key "name"/ },
  { name: 'strategic merge patch: $retainKeys that is not a list', method: 'PATCH', path: `${PODS}/bound`, options: { rawBody: '{"spec":{"$retainKeys":5}}', headers: STRATEGIC }, code: 400, reason: 'BadRequest', message: /\$retainKeys at spec must be a list/ },
  { name: 'patch with an unsupported Content-Type', method: 'PATCH', path: `${LEASES}/target`, options: { rawBody: '{}', headers: { 'Content-Type': 'text/plain' } }, code: 415, reason: 'UnsupportedMediaType', message: /application\/json-patch\+json/ },
  // --- Drover's own endpoints ----------------------------------------------------------------------------
  { name: 'registration with an address that is not an IP address', method: 'POST', path: '/drover/v1/register', options: { body: { nodeName: 'n1', nodeId: 'i', password: 'p', addresses: ['not an address!'] } }, code: 400, reason: 'BadRequest', message: /"addresses" holds "not an address!", which is not an IP address/ },
  { name: 'registration with 5000 addresses', method: 'POST', path: '/drover/v1/register', options: { body: { nodeName: 'n1', nodeId: 'i', password: 'p', addresses: Array.from({ length: 5000 }, (_, i) => `10.0.${i >> 8}.${i & 255}`) } }, code: 400, reason: 'BadRequest', message: /must be a list of at most 8 IP addresses/ },
  { name: 'registration with a password over 256 characters', method: 'POST', path: '/drover/v1/register', options: { body: { nodeName: 'n1', nodeId: 'i', password: 'p'.repeat(100_000) } }, code: 400, reason: 'BadRequest', message: /"password" is longer than 256 characters/ },
  { name: 'registration with a malformed body', method: 'POST', path: '/drover/v1/register', options: { rawBody: '{"nodeName":' }, code: 400, reason: 'BadRequest', message: /error decoding JSON request body/ },
  // Last: it starts the deletion of the pod the cases above use.
  {
    name: 'gracePeriodSeconds=-1: 1 s, as kube-apiserver',
    method: 'DELETE',
    path: `${PODS}/bound?gracePeriodSeconds=-1`,
    code: 200,
    check: (pod) => assert.equal(pod.metadata.deletionGracePeriodSeconds, 1),
  },
  { name: 'cluster-config body that is an array', method: 'PUT', path: '/drover/v1/cluster-config', options: { rawBody: '[1]' }, code: 400, reason: 'BadRequest', message: /cluster config: body must be a JSON object/ },
];

describe('hostile input', () => {
  let server: ServerProcess;

  before(async () => {
    // Debug logging: every request is logged when it ends, so a test knows when to read the log.
    server = await startServer({ args: ['--log-level', 'debug'], handMadeNodes: true });
    joinSecret = fs.readFileSync(path.join(server.dataDir, 'token'), 'utf8').trim().split('::server:')[1]!;
    const setup: [string, unknown][] = [
      [LEASES, { metadata: { name: 'target' }, spec: { holderIdentity: 'a' } }],
      // A Node with no agent behind it (never judged: handMadeNodes), and a pod bound to it,
      // whose deletion is therefore graceful.
      ['/api/v1/nodes', { metadata: { name: 'ghost' } }],
      [PODS, { metadata: { name: 'bound' }, spec: podSpec({ nodeName: 'ghost' }) }],
      [DEPLOYMENTS, deployment('web', 1)],
    ];
    for (const [where, body] of setup) {
      const res = await request(server, 'POST', where, { body });
      assert.equal(res.status, 201, res.text);
    }
  });

  after(() => cleanup());

  for (const c of CASES) {
    it(c.name, async () => {
      const mark = server.output().length;
      let status: number;
      let text: string;
      if (c.raw !== undefined) {
        ({ status, body: text } = await rawExchange(server, c.raw));
      } else {
        const registration = c.path === '/drover/v1/register' ? { token: joinSecret } : {};
        // A fresh connection per case: one case's half-read body must not become the next request.
        ({ status, text } = await request(server, c.method, c.path, { timeoutMs: 60_000, agent: false, ...registration, ...c.options }));
      }
      assert.equal(status, c.code, `${c.name}: expected ${c.code}, got ${status}: ${text.slice(0, 400)}`);
      const body = c.message
        ? expectStatusBody(text, c.code, c.reason, c.message, c.name)
        : (JSON.parse(text) as Record<string, unknown>);
      c.check?.(body as Record<string, any>);
      await expectQuietLog(server, mark, c.name);
    });
  }

  it('a client that disconnects halfway through its body leaves no error in the log', async () => {
    const mark = server.output().length;
    const socket = await connectTls(server);
    let received = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (received += chunk));
    // With Expect: 100-continue, Node answers "100 Continue" as it hands the request to the
    // handler: from then on the handler is reading the body.
    socket.write(
      `POST ${LEASES} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${server.token}\r\n` +
        'Content-Type: application/json\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n\r\n',
    );
    await eventually(() => received.startsWith('HTTP/1.1 100'), 'the server to ask for the body');
    socket.write('{"metadata":');
    socket.destroy();
    await expectQuietLog(server, mark, 'disconnect mid-body');
    assert.ok(
      server.output().slice(mark).includes('the client closed the connection while sending its request'),
      'the server noticed the disconnect (debug log)',
    );
  });
});

describe('protobuf bodies from a fuzzer', () => {
  /** A small seeded generator, so that a failure can be replayed. */
  function random(seed: number): () => number {
    let state = seed;
    return () => {
      state = (state + 0x6d2b79f5) | 0;
      let t = Math.imul(state ^ (state >>> 15), 1 | state);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }
  const varint = (n: number): number[] => {
    const out: number[] = [];
    let v = BigInt(n);
    do {
      let byte = Number(v & 0x7fn);
      v >>= 7n;
      if (v) byte |= 0x80;
      out.push(byte);
    } while (v);
    return out;
  };
  const field = (n: number, wire: number): number[] => varint(n * 8 + wire);
  const bytes = (n: number, content: number[]): number[] => [...field(n, 2), ...varint(content.length), ...content];
  const text = (s: string): number[] => [...Buffer.from(s)];
  /** A random message: random field numbers and wire types, nested messages, strings the decoders know. */
  function message(next: () => number, depth: number): number[] {
    const out: number[] = [];
    const count = Math.floor(next() * 6);
    for (let i = 0; i < count; i++) {
      const n = 1 + Math.floor(next() * 20);
      const kind = next();
      if (kind < 0.3) out.push(...field(n, 0), ...varint(Math.floor(next() * 2 ** 40)));
      else if (kind < 0.7 && depth < 5) out.push(...bytes(n, message(next, depth + 1)));
      else if (kind < 0.85) out.push(...bytes(n, text(['', 'x', 'Always', 'TCP', '100m', '1Gi', 'é', '\u0000'][Math.floor(next() * 8)]!)));
      else if (kind < 0.92) out.push(...field(n, 5), 1, 2, 3, 4);
      else out.push(...field(n, 1), 1, 2, 3, 4, 5, 6, 7, 8);
    }
    return out;
  }

  it('20000 random envelopes of every decoded kind are each a value or a 4xx ApiError', () => {
    const kinds = [['v1', 'Namespace'], ['policy/v1', 'PodDisruptionBudget'], ['v1', 'Pod'], ['apps/v1', 'Deployment'], ['v1', 'DeleteOptions']];
    const outcomes = { decoded: 0, refused: 0 };
    for (let seed = 0; seed < 20_000; seed++) {
      const next = random(seed);
      const [apiVersion, kind] = kinds[seed % kinds.length]!;
      let raw = message(next, 0);
      if (next() < 0.1) raw = raw.slice(0, Math.floor(next() * raw.length)); // truncated
      const body = Buffer.from([...Buffer.from('k8s\0', 'binary'), ...bytes(1, [...bytes(1, text(apiVersion!)), ...bytes(2, text(kind!))]), ...bytes(2, raw)]);
      try {
        decodeKubernetesProtobuf(body);
        outcomes.decoded++;
      } catch (error) {
        assert.ok(error instanceof ApiError && error.code >= 400 && error.code < 500, `seed ${seed} (${kind}): ${String(error)}`);
        outcomes.refused++;
      }
    }
    // Both paths were exercised, or the generator proves nothing.
    assert.ok(outcomes.decoded > 100 && outcomes.refused > 100, JSON.stringify(outcomes));
  });
});
