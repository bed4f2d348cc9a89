import type { ContainerUser, ImageRunConfig } from '../run-spec.js';

/**
 * How an image's config and a container's spec combine into the process that runs, the way
 * Kubernetes (kubelet and its CRI runtime) does it, as pure functions: the argv (Entrypoint/Cmd
 * against command/args, with `$(VAR)` expansion), the environment, the working directory and the
 * numeric user (names looked up in the image's own /etc/passwd and /etc/group).
 */

export class CommandError extends Error {
  /** kubelet's waiting reason for the container: CreateContainerConfigError or CreateContainerError. */
  constructor(
    message: string,
    readonly reason: 'CreateContainerConfigError' | 'CreateContainerError' = 'CreateContainerError',
  ) {
    super(message);
    this.name = 'CommandError';
  }
}

/**
 * kubelet's `$(VAR)` expansion of command and args: `$(NAME)` becomes NAME's value when the
 * container's environment defines it and stays as written otherwise; `$$` is an escaped `$`;
 * any other `$` is kept.
 */
export function expandVars(input: string, env: Readonly<Record<string, string>>): string {
  let out = '';
  for (let i = 0; i < input.length; i++) {
    const ch = input[i]!;
    if (ch !== '$' || i === input.length - 1) {
      out += ch;
      continue;
    }
    const next = input[i + 1]!;
    if (next === '$') {
      out += '$';
      i++;
    } else if (next === '(') {
      const close = input.indexOf(')', i + 2);
      if (close < 0) {
        // Unterminated: the rest stays as written.
        out += input.slice(i);
        break;
      }
      const name = input.slice(i + 2, close);
      out += Object.hasOwn(env, name) && name !== '' ? env[name] : `$(${name})`;
      i = close;
    } else {
      out += ch;
    }
  }
  return out;
}

/**
 * The argv of a container. With no `command`: `args` (or else the image's Cmd) follow the image's
 * Entrypoint (an Entrypoint of exactly `[""]` means none). With a `command`, the image's
 * Entrypoint and Cmd are both ignored. Nothing at all is an error.
 */
export function containerArgv(
  image: Pick<ImageRunConfig, 'entrypoint' | 'cmd'>,
  command: readonly string[] | undefined,
  args: readonly string[] | undefined,
  env: Readonly<Record<string, string>> = {},
): { command: string[]; args: string[] } {
  let cmd = (command ?? []).map((part) => expandVars(part, env));
  let rest = (args ?? []).map((part) => expandVars(part, env));
  if (cmd.length === 0) {
    if (rest.length === 0) rest = [...(image.cmd ?? [])];
    const entrypoint = image.entrypoint ?? [];
    if (!(entrypoint.length === 1 && entrypoint[0] === '')) cmd = [...entrypoint];
  }
  if (cmd.length === 0 && rest.length === 0) {
    throw new CommandError('no command specified: the container sets no command or args and its image has no Entrypoint or Cmd');
  }
  // runc needs args[0]: keep the split for the record, but never an empty program name.
  if (cmd.length === 0) return { command: rest.slice(0, 1), args: rest.slice(1) };
  return { command: cmd, args: rest };
}

/** The default PATH a runtime gives a container whose image sets none. */
export const CONTAINER_DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

function parseEnvList(list: readonly string[] | undefined): [string, string][] {
  return (list ?? []).flatMap((entry): [string, string][] => {
    const at = entry.indexOf('=');
    if (at <= 0) return [];
    return [[entry.slice(0, at), entry.slice(at + 1)]];
  });
}

/**
 * A container's environment: PATH (the default when the image sets none), HOSTNAME (the pod's),
 * then the image's Env, then the pod's resolved env (env, envFrom, downward API); a later value
 * wins. Order is kept: it is the order `env` shows in the container.
 */
export function containerEnv(imageEnv: readonly string[] | undefined, hostname: string, podEnv: Readonly<Record<string, string>>): Record<string, string> {
  const result: Record<string, string> = { PATH: CONTAINER_DEFAULT_PATH, HOSTNAME: hostname };
  for (const [key, value] of parseEnvList(imageEnv)) result[key] = value;
  for (const [key, value] of Object.entries(podEnv)) result[key] = value;
  return result;
}

/** The container's working directory: its own, else the image's, else `/`. */
export function containerCwd(workingDir: string | undefined, image: Pick<ImageRunConfig, 'workingDir'>): string {
  const chosen = workingDir || image.workingDir || '/';
  if (!chosen.startsWith('/')) throw new CommandError(`working directory ${JSON.stringify(chosen)} is not an absolute path`);
  return chosen;
}

// --- users ---

export interface PasswdEntry {
  name: string;
  uid: number;
  gid: number;
  home: string;
}

export interface GroupEntry {
  name: string;
  gid: number;
  members: string[];
}

const isId = (text: string | undefined): boolean => text !== undefined && /^[0-9]{1,10}$/.test(text) && Number(text) <= 0xffffffff;

/** `/etc/passwd` lines (`name:pw:uid:gid:gecos:home:shell`); malformed lines are skipped. */
export function parsePasswd(text: string): PasswdEntry[] {
  return text.split('\n').flatMap((line): PasswdEntry[] => {
    if (!line || line.startsWith('#')) return [];
    const f = line.split(':');
    if (f.length < 4 || !f[0] || !isId(f[2]) || !isId(f[3])) return [];
    return [{ name: f[0], uid: Number(f[2]), gid: Number(f[3]), home: f[5] ?? '' }];
  });
}

/** `/etc/group` lines (`name:pw:gid:member,member`); malformed lines are skipped. */
export function parseGroup(text: string): GroupEntry[] {
  return text.split('\n').flatMap((line): GroupEntry[] => {
    if (!line || line.startsWith('#')) return [];
    const f = line.split(':');
    if (f.length < 3 || !f[0] || !isId(f[2])) return [];
    return [{ name: f[0], gid: Number(f[2]), members: (f[3] ?? '').split(',').filter(Boolean) }];
  });
}

export interface UserInputs {
  /** The image's `User` (`name`, `uid`, `name:group`, `uid:gid` …; empty = root). */
  imageUser?: string;
  runAsUser?: number;
  runAsGroup?: number;
  runAsNonRoot?: boolean;
  /** The pod's supplementalGroups (and fsGroup), added to the process' groups. */
  supplementalGroups?: readonly number[];
  /** The image's /etc/passwd and /etc/group, absent when the image has none. */
  passwd?: readonly PasswdEntry[];
  group?: readonly GroupEntry[];
}

/**
 * The numeric user a container runs as. runAsUser replaces the image's user (its group too);
 * runAsGroup replaces the group either way. A user given by name must exist in the image's
 * /etc/passwd, a group by name in its /etc/group; a uid alone takes its group from /etc/passwd
 * (0 when it has no entry). Supplementary groups: the user's memberships in /etc/group, then the
 * pod's supplementalGroups. runAsNonRoot refuses uid 0, and a named image user it cannot check.
 */
export function resolveUser(input: UserInputs): ContainerUser {
  const passwd = input.passwd ?? [];
  const groups = input.group ?? [];
  let userPart: string;
  let groupPart: string | undefined;
  if (input.runAsUser !== undefined) {
    userPart = String(input.runAsUser);
  } else {
    const spec = (input.imageUser ?? '').trim();
    const at = spec.indexOf(':');
    userPart = at < 0 ? spec : spec.slice(0, at);
    groupPart = at < 0 ? undefined : spec.slice(at + 1);
    if (input.runAsNonRoot && userPart !== '' && !isId(userPart)) {
      throw new CommandError(
        `container has runAsNonRoot and image has non-numeric user (${userPart}), cannot verify user is non-root`,
        'CreateContainerConfigError',
      );
    }
  }
  let uid: number;
  let gid: number | undefined;
  let name: string | undefined;
  if (userPart === '') {
    uid = 0;
  } else if (isId(userPart)) {
    uid = Number(userPart);
  } else {
    const entry = passwd.find((p) => p.name === userPart);
    if (!entry) throw new CommandError(`unable to find user ${userPart}: no matching entries in the image's /etc/passwd`);
    uid = entry.uid;
  }
  const entry = passwd.find((p) => p.uid === uid && (isId(userPart) || userPart === '' || p.name === userPart));
  if (entry) {
    name = entry.name;
    gid = entry.gid;
  }
  if (input.runAsGroup !== undefined) {
    gid = input.runAsGroup;
  } else if (groupPart !== undefined && groupPart !== '') {
    if (isId(groupPart)) gid = Number(groupPart);
    else {
      const group = groups.find((g) => g.name === groupPart);
      if (!group) throw new CommandError(`unable to find group ${groupPart}: no matching entries in the image's /etc/group`);
      gid = group.gid;
    }
  }
  if (input.runAsNonRoot && uid === 0) {
    throw new CommandError('container has runAsNonRoot and image will run as root', 'CreateContainerConfigError');
  }
  const finalGid = gid ?? 0;
  const additional: number[] = [];
  const add = (value: number): void => {
    if (value !== finalGid && !additional.includes(value)) additional.push(value);
  };
  if (name !== undefined) for (const group of groups) if (group.members.includes(name)) add(group.gid);
  for (const value of input.supplementalGroups ?? []) add(value);
  return { uid, gid: finalGid, ...(additional.length ? { additionalGids: additional } : {}) };
}
