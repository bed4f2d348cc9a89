import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { randomBytes, webcrypto } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { isIP } from 'node:net';
import { writeFileAtomic } from './files.js';

/**
 * The cluster's certificate authority and the API server's serving certificate: ECDSA P-256,
 * as K3s uses, generated with @peculiar/x509 on Node's WebCrypto.
 */

x509.cryptoProvider.set(webcrypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0]);

type CryptoKey = webcrypto.CryptoKey;
type CryptoKeyPair = webcrypto.CryptoKeyPair;

const ALGORITHM = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
const DAY_MS = 24 * 60 * 60 * 1000;
const CA_LIFETIME_DAYS = 3650;
const SERVING_LIFETIME_DAYS = 365;
/** Re-issue the serving certificate when it has less than this left, as K3s does at start. */
const RENEW_BEFORE_DAYS = 90;
/**
 * Every certificate the cluster issues (the CA included) is valid from this long before it was
 * issued, as public CAs back-date theirs: a host whose clock is behind (a new VM before its NTP
 * sync, a drifting RTC) by less than this still accepts the cluster's certificates, so it can join
 * a cluster younger than its skew. An hour covers the skews seen in practice; a longer one would
 * only widen what a certificate issued now claims about the past.
 */
export const CERTIFICATE_BACKDATE_MS = 60 * 60 * 1000;

export interface KeyPair {
  certificatePem: string;
  privateKeyPem: string;
}

export interface ServingMaterial {
  ca: KeyPair;
  serving: KeyPair;
}

function serialNumber(): string {
  // Positive 16-byte serial: clear the top bit.
  const bytes = randomBytes(16);
  bytes[0] = bytes[0]! & 0x7f;
  return bytes.toString('hex');
}

async function exportPrivateKey(key: CryptoKey): Promise<string> {
  const der = await webcrypto.subtle.exportKey('pkcs8', key);
  return x509.PemConverter.encode(der, 'PRIVATE KEY');
}

async function importPrivateKey(pem: string): Promise<CryptoKey> {
  const der = x509.PemConverter.decode(pem)[0];
  if (!der) throw new Error('no private key in PEM');
  return webcrypto.subtle.importKey('pkcs8', der, ALGORITHM, true, ['sign']);
}

async function generateKeys(): Promise<CryptoKeyPair> {
  return webcrypto.subtle.generateKey(ALGORITHM, true, ['sign', 'verify']);
}

export async function createCertificateAuthority(commonName: string): Promise<KeyPair> {
  const keys = await generateKeys();
  const now = Date.now();
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serialNumber(),
    name: `CN=${commonName}`,
    notBefore: new Date(now - CERTIFICATE_BACKDATE_MS),
    notAfter: new Date(now + CA_LIFETIME_DAYS * DAY_MS),
    signingAlgorithm: ALGORITHM,
    keys,
    extensions: [
      new x509.BasicConstraintsExtension(true, undefined, true),
      new x509.KeyUsagesExtension(
        x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign | x509.KeyUsageFlags.digitalSignature,
        true,
      ),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return { certificatePem: cert.toString('pem'), privateKeyPem: await exportPrivateKey(keys.privateKey) };
}

export interface LeafRequest {
  commonName: string;
  organization?: string;
  /** Several O values (a user's groups); after `organization` when both are given. */
  organizations?: readonly string[];
  /** DNS names and IP addresses. */
  subjectAltNames?: readonly string[];
  /** `peer`: both server and client authentication (etcd peers dial each other). */
  usage: 'server' | 'client' | 'peer';
  /** Valid until (default: one year from now). */
  notAfter?: Date;
  /** Valid from (default: now, back-dated by CERTIFICATE_BACKDATE_MS). */
  notBefore?: Date;
}

export async function issueCertificate(ca: KeyPair, request: LeafRequest): Promise<KeyPair> {
  const keys = await generateKeys();
  const cert = await signLeaf(ca, request, keys.publicKey);
  return { certificatePem: cert.toString('pem'), privateKeyPem: await exportPrivateKey(keys.privateKey) };
}

/**
 * The subject as a structured name, one attribute per RDN, rather than a `CN=…, O=…` string:
 * a user's name or group holding `,`, `+` or `=` stays one value instead of becoming others.
 */
function subjectName(request: LeafRequest): x509.JsonName {
  const organizations = [...(request.organization ? [request.organization] : []), ...(request.organizations ?? [])];
  return [{ CN: [request.commonName] }, ...organizations.map((o) => ({ O: [o] }))];
}

async function signLeaf(ca: KeyPair, request: LeafRequest, publicKey: CryptoKey | x509.PublicKey): Promise<x509.X509Certificate> {
  const caCert = new x509.X509Certificate(ca.certificatePem);
  const caKey = await importPrivateKey(ca.privateKeyPem);
  const now = Date.now();
  const extensions: x509.Extension[] = [
    new x509.BasicConstraintsExtension(false, undefined, true),
    new x509.KeyUsagesExtension(
      x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment,
      true,
    ),
    new x509.ExtendedKeyUsageExtension(
      request.usage === 'peer'
        ? [x509.ExtendedKeyUsage.serverAuth, x509.ExtendedKeyUsage.clientAuth]
        : [request.usage === 'server' ? x509.ExtendedKeyUsage.serverAuth : x509.ExtendedKeyUsage.clientAuth],
      false,
    ),
    await x509.AuthorityKeyIdentifierExtension.create(caCert, false),
  ];
  if (request.subjectAltNames?.length) {
    extensions.push(
      new x509.SubjectAlternativeNameExtension(
        request.subjectAltNames.map((name) => ({ type: isIP(name) ? ('ip' as const) : ('dns' as const), value: name })),
        false,
      ),
    );
  }
  return x509.X509CertificateGenerator.create({
    serialNumber: serialNumber(),
    subject: subjectName(request),
    issuer: caCert.subject,
    notBefore: request.notBefore ?? new Date(now - CERTIFICATE_BACKDATE_MS),
    notAfter: request.notAfter ?? new Date(now + SERVING_LIFETIME_DAYS * DAY_MS),
    signingAlgorithm: ALGORITHM,
    publicKey,
    signingKey: caKey,
    extensions,
  });
}

export class CertificateRequestError extends Error {
  override name = 'CertificateRequestError';
}

/**
 * A client certificate for the key in a PKCS#10 request, with the subject and lifetime the
 * caller decides (the request's own subject is ignored): the private key never leaves whoever
 * made the request, and its signature proves they hold it.
 */
export async function signCertificateRequest(
  ca: KeyPair,
  requestPem: string,
  request: Omit<LeafRequest, 'usage' | 'subjectAltNames'>,
): Promise<{ certificatePem: string; serialNumber: string; notBefore: Date; notAfter: Date }> {
  let csr: x509.Pkcs10CertificateRequest;
  try {
    csr = new x509.Pkcs10CertificateRequest(requestPem);
  } catch (error) {
    throw new CertificateRequestError(`not a PEM certificate signing request (${(error as Error).message})`);
  }
  if (!(await csr.verify().catch(() => false))) throw new CertificateRequestError('the certificate signing request’s signature does not verify');
  const cert = await signLeaf(ca, { ...request, usage: 'client' }, csr.publicKey);
  return { certificatePem: cert.toString('pem'), serialNumber: cert.serialNumber, notBefore: cert.notBefore, notAfter: cert.notAfter };
}

/** A new key (ECDSA P-256) and a PKCS#10 request for it, naming `commonName` and `organizations`. */
export async function createCertificateRequest(
  commonName: string,
  organizations: readonly string[],
): Promise<{ requestPem: string; privateKeyPem: string }> {
  const keys = await generateKeys();
  const csr = await x509.Pkcs10CertificateRequestGenerator.create({
    name: subjectName({ commonName, organizations, usage: 'client' }),
    keys,
    signingAlgorithm: ALGORITHM,
  });
  return { requestPem: csr.toString('pem'), privateKeyPem: await exportPrivateKey(keys.privateKey) };
}

/** When a certificate (PEM) is valid. */
export function certificateValidity(pem: string): { notBefore: Date; notAfter: Date } {
  const cert = new x509.X509Certificate(pem);
  return { notBefore: cert.notBefore, notAfter: cert.notAfter };
}

/** The names every serving certificate carries, plus the user's `--tls-san` entries. */
export function servingNames(extra: readonly string[] = []): string[] {
  const names = ['localhost', '127.0.0.1', '::1', os.hostname(), ...extra];
  return [...new Set(names.map((n) => n.trim()).filter(Boolean))];
}

function certificateNames(pem: string): Set<string> {
  const cert = new x509.X509Certificate(pem);
  const san = cert.getExtension(x509.SubjectAlternativeNameExtension);
  const names = new Set<string>();
  for (const entry of san?.names.items ?? []) names.add(entry.value);
  return names;
}

function needsReissue(pem: string, wanted: readonly string[], ca: KeyPair): boolean {
  const cert = new x509.X509Certificate(pem);
  if (cert.notAfter.getTime() - Date.now() < RENEW_BEFORE_DAYS * DAY_MS) return true;
  if (cert.issuer !== new x509.X509Certificate(ca.certificatePem).subject) return true;
  const have = certificateNames(pem);
  return wanted.some((name) => !have.has(name));
}

function readPair(certFile: string, keyFile: string): KeyPair | undefined {
  if (!fs.existsSync(certFile) || !fs.existsSync(keyFile)) return undefined;
  return { certificatePem: fs.readFileSync(certFile, 'utf8'), privateKeyPem: fs.readFileSync(keyFile, 'utf8') };
}

function writePair(pair: KeyPair, certFile: string, keyFile: string): void {
  writeFileAtomic(keyFile, pair.privateKeyPem, 0o600);
  writeFileAtomic(certFile, pair.certificatePem, 0o644);
}

/**
 * Load the CA and serving certificate from `dir`, creating the CA on first start and
 * (re)issuing the serving certificate when a requested name is missing or it nears expiry.
 */
export async function ensureServingMaterial(
  dir: string,
  subjectAltNames: readonly string[],
): Promise<ServingMaterial & { created: string[] }> {
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const created: string[] = [];
  const caCert = path.join(dir, 'server-ca.crt');
  const caKey = path.join(dir, 'server-ca.key');
  let ca = readPair(caCert, caKey);
  if (!ca) {
    ca = await createCertificateAuthority(`drover-server-ca@${Math.floor(Date.now() / 1000)}`);
    writePair(ca, caCert, caKey);
    created.push('certificate authority');
  }
  const servingCert = path.join(dir, 'serving.crt');
  const servingKey = path.join(dir, 'serving.key');
  let serving = readPair(servingCert, servingKey);
  if (!serving || needsReissue(serving.certificatePem, subjectAltNames, ca)) {
    serving = await issueCertificate(ca, {
      commonName: 'drover-apiserver',
      subjectAltNames,
      usage: 'server',
    });
    writePair(serving, servingCert, servingKey);
    created.push('serving certificate');
  }
  return { ca, serving, created };
}
