/** What `GET /version` answers, in kube-apiserver's shape (kubectl version reads it). */
export interface VersionInfo {
  major: string;
  minor: string;
  gitVersion: string;
  gitCommit: string;
  gitTreeState: string;
  buildDate: string;
  goVersion: string;
  compiler: string;
  platform: string;
}

/** Drover's own version. */
export const DROVER_VERSION = '0.1.0';

/**
 * The Kubernetes API level Drover speaks. The minor matters: kubectl's dispatcher picks its
 * client binary by it, and kubectl warns when client and server minors differ by more than one.
 */
export const KUBERNETES_VERSION = { major: '1', minor: '32', patch: '0' };

export function versionInfo(): VersionInfo {
  return {
    major: KUBERNETES_VERSION.major,
    minor: KUBERNETES_VERSION.minor,
    gitVersion: `v${KUBERNETES_VERSION.major}.${KUBERNETES_VERSION.minor}.${KUBERNETES_VERSION.patch}+drover${DROVER_VERSION}`,
    gitCommit: 'drover',
    gitTreeState: 'clean',
    buildDate: '2026-11-29T00:00:00Z',
    goVersion: `node${process.versions.node}`,
    compiler: 'tsc',
    platform: `${process.platform}/${process.arch === 'x64' ? 'amd64' : process.arch}`,
  };
}
