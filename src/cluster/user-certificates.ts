import { ApiError, errors } from '../apiserver/errors.js';
import { isJsonObject } from '../apiserver/json.js';
import { MASTERS_GROUP } from '../apiserver/rbac/types.js';
import { CertificateRequestError, certificateValidity, type KeyPair, signCertificateRequest } from '../security/pki.js';

/**
 * Users with client certificates (`drover kubeconfig create`): an admin asks a server, which holds
 * the client CA, to sign a certificate for a user name and groups. The caller makes the key and
 * sends only a certificate signing request, so the private key never leaves the caller's machine;
 * the name, groups and lifetime come from the request's fields, never from its subject.
 *
 * Kubernetes cannot revoke a client certificate: it is valid until it expires, whoever holds it.
 * So lifetimes are bounded (a year by default, as K3s), every issue is recorded (an Event and a
 * log line), and names that would impersonate Kubernetes' or Drover's own identities are refused.
 */

export const CLIENT_CERTIFICATES_PATH = '/drover/v1/client-certificates';

/** One year, as K3s' client certificates. */
export const DEFAULT_USER_CERTIFICATE_SECONDS = 365 * 24 * 3600;
/** Kubernetes' CSR API refuses shorter ones too (expirationSeconds >= 600). */
export const MIN_USER_CERTIFICATE_SECONDS = 600;
/** RFC 5280's upper bound for a common name and an organization name (ub-common-name, ub-organization-name). */
export const MAX_SUBJECT_VALUE = 64;
export const MAX_GROUPS = 20;
const RESERVED_PREFIX = 'system:';

export interface UserCertificateRequest {
  name: string;
  /** Without system:authenticated, which every user has anyway. */
  groups: string[];
  expirationSeconds: number;
  /** PEM PKCS#10: only its public key is used, once its signature proves the caller holds the key. */
  certificateSigningRequest: string;
  /** The deliberate opt-in for group system:masters (full admin, irrevocable until expiry). */
  allowMasters: boolean;
}

export interface IssuedUserCertificate {
  name: string;
  groups: string[];
  serialNumber: string;
  notBefore: string;
  notAfter: string;
  /** PEM, from the client CA. */
  certificate: string;
}

/** Why a value cannot be a user name or group: empty, too long, or holding characters that are not text. */
function valueProblem(what: string, value: string): string | undefined {
  if (!value) return `${what} must not be empty`;
  if (value.length > MAX_SUBJECT_VALUE) return `${what} ${JSON.stringify(value.slice(0, 80))} is longer than ${MAX_SUBJECT_VALUE} characters`;
  if (value.trim() !== value) return `${what} ${JSON.stringify(value)} has leading or trailing white space`;
  // Control, bidi and other format characters: names show up in logs, events and terminals.
  if (/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u.test(value)) return `${what} ${JSON.stringify(value)} holds control or formatting characters`;
  return undefined;
}

/**
 * What is wrong with a user's name and groups (empty when nothing). `system:` names and groups
 * belong to Kubernetes' and Drover's own identities (system:admin, system:node:*, the API
 * servers' system:drover:apiserver, service accounts, system:nodes...): a certificate with one
 * would pass for them. The one exception is system:masters, the admin group, and only when asked
 * for deliberately.
 */
export function userCertificateProblems(name: string, groups: readonly string[], allowMasters: boolean): string[] {
  const problems: string[] = [];
  const nameProblem = valueProblem('the user name', name);
  if (nameProblem) problems.push(nameProblem);
  else if (name.toLowerCase().startsWith(RESERVED_PREFIX)) {
    problems.push(`the user name ${JSON.stringify(name)} is reserved: names starting with "system:" are Kubernetes' and Drover's own identities`);
  }
  if (groups.length > MAX_GROUPS) problems.push(`at most ${MAX_GROUPS} groups, not ${groups.length}`);
  for (const group of groups) {
    const problem = valueProblem('a group', group);
    if (problem) problems.push(problem);
    else if (group === MASTERS_GROUP) {
      if (!allowMasters) {
        problems.push(
          `group ${MASTERS_GROUP} makes the user a full cluster admin that cannot be revoked before the certificate expires; ` +
            'ask for it deliberately (drover kubeconfig create --allow-masters)',
        );
      }
    } else if (group.toLowerCase().startsWith(RESERVED_PREFIX)) {
      problems.push(`group ${JSON.stringify(group)} is reserved: groups starting with "system:" are Kubernetes' and Drover's own`);
    }
  }
  return problems;
}

function stringList(body: Record<string, unknown>, field: string): string[] {
  const value = body[field] ?? [];
  if (!Array.isArray(value) || !value.every((v) => typeof v === 'string')) throw errors.badRequest(`client certificate: "${field}" must be a list of strings`);
  return value as string[];
}

/** The request's fields from a JSON body: 400 for a malformed one, 422 for names and groups the rules refuse. */
export function parseUserCertificateRequest(body: unknown): UserCertificateRequest {
  if (!isJsonObject(body)) throw errors.badRequest('client certificate: body must be a JSON object');
  const { name, certificateSigningRequest, expirationSeconds = DEFAULT_USER_CERTIFICATE_SECONDS, allowMasters = false } = body;
  if (typeof name !== 'string') throw errors.badRequest('client certificate: "name" must be a string');
  if (typeof certificateSigningRequest !== 'string' || !certificateSigningRequest) {
    throw errors.badRequest('client certificate: "certificateSigningRequest" (PEM) is required');
  }
  if (typeof allowMasters !== 'boolean') throw errors.badRequest('client certificate: "allowMasters" must be a boolean');
  if (!Number.isSafeInteger(expirationSeconds) || (expirationSeconds as number) < MIN_USER_CERTIFICATE_SECONDS) {
    throw new ApiError(422, 'Invalid', `client certificate: "expirationSeconds" must be a whole number of seconds, at least ${MIN_USER_CERTIFICATE_SECONDS} (10m)`);
  }
  const groups = [...new Set(stringList(body, 'groups'))];
  const problems = userCertificateProblems(name, groups, allowMasters);
  if (problems.length) throw new ApiError(422, 'Invalid', `client certificate for ${JSON.stringify(name.slice(0, 80))} refused: ${problems.join('; ')}`);
  return { name, groups, expirationSeconds: expirationSeconds as number, certificateSigningRequest, allowMasters };
}

/** Sign the request's key for its user with the client CA; no longer than the CA itself lives. */
export async function issueUserCertificate(clientCa: KeyPair, request: UserCertificateRequest, now = Date.now()): Promise<IssuedUserCertificate> {
  const caNotAfter = certificateValidity(clientCa.certificatePem).notAfter;
  const notAfter = new Date(now + request.expirationSeconds * 1000);
  if (notAfter > caNotAfter) {
    throw new ApiError(422, 'Invalid', `client certificate: it would outlive the client CA, which expires at ${caNotAfter.toISOString()}; ask for a shorter expiration`);
  }
  try {
    const signed = await signCertificateRequest(clientCa, request.certificateSigningRequest, {
      commonName: request.name,
      organizations: request.groups,
      notAfter,
    });
    return {
      name: request.name,
      groups: request.groups,
      serialNumber: signed.serialNumber,
      notBefore: signed.notBefore.toISOString(),
      notAfter: signed.notAfter.toISOString(),
      certificate: signed.certificatePem,
    };
  } catch (error) {
    if (error instanceof CertificateRequestError) throw errors.badRequest(`client certificate: ${error.message}`);
    throw error;
  }
}
