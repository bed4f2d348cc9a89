import os from 'node:os';

/**
 * The environments of a pod's processes. Neither the supervisor nor a container inherits the
 * agent's environment, which may hold the cluster token (DROVER_TOKEN) and whatever else the
 * agent was started with: a pod gets only what a Kubernetes container would get.
 */

/**
 * The PATH of every pod process, whatever the agent's: the default a container runtime gives a
 * container whose image sets none (containerd, CRI-O). A pod that needs another sets PATH in its
 * `env`, which wins.
 */
export const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** The supervisor is Drover's own code: it needs nothing from the environment. */
export function supervisorEnvironment(): Record<string, string> {
  return { PATH: DEFAULT_PATH };
}

/**
 * The home directory of the account the pod runs as, from the user database (not from the
 * agent's HOME), as a container runtime takes it from the image's /etc/passwd; `/` when the
 * account has no entry, as container runtimes do too.
 */
function accountHome(): string {
  try {
    return os.userInfo().homedir || '/';
  } catch {
    return '/';
  }
}

/** A container: PATH and HOME as a runtime sets them, then the pod's own env (HOSTNAME, downward API, `env`), which wins. */
export function containerEnvironment(podEnv: Record<string, string>): Record<string, string> {
  return { PATH: DEFAULT_PATH, HOME: accountHome(), ...podEnv };
}
