import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/**
 * Calling CNI plugins as the CNI specification says (there is no libcni in Node): the plugin
 * binary found in the plugin directories, its network configuration as JSON on stdin, the
 * operation in CNI_COMMAND and the container in CNI_CONTAINERID/CNI_NETNS/CNI_IFNAME, its result
 * or error as JSON on stdout. A network configuration list runs its plugins in order for ADD, each
 * given the previous one's result, and in reverse for DEL, given the cached result of the ADD
 * (the runtime keeps that cache: here the caller, src/agent/network/pod-network.ts).
 */

/** Debian's containernetworking-plugins first, then where upstream installs put them. */
export const DEFAULT_CNI_BIN_DIRS: readonly string[] = ['/usr/lib/cni', '/opt/cni/bin'];
const PLUGIN_TIMEOUT_MS = 30_000;

export interface CniInterface {
  name: string;
  mac?: string;
  sandbox?: string;
}

export interface CniIp {
  address: string;
  gateway?: string;
  interface?: number;
}

export interface CniResult {
  cniVersion: string;
  interfaces?: CniInterface[];
  ips?: CniIp[];
  routes?: { dst: string; gw?: string }[];
  dns?: Record<string, unknown>;
}

export interface NetworkConfigList {
  cniVersion: string;
  name: string;
  plugins: (Record<string, unknown> & { type: string; capabilities?: Record<string, boolean> })[];
}

/** Where and for whom a plugin runs. */
export interface CniTarget {
  containerId: string;
  netns: string;
  ifName: string;
  /** CNI_ARGS: `K8S_POD_NAMESPACE`, `K8S_POD_NAME`, … (IgnoreUnknown is added). */
  args: Record<string, string>;
}

/** A plugin's refusal: its code and message as it gave them. */
export class CniError extends Error {
  override name = 'CniError';
  constructor(
    readonly plugin: string,
    readonly command: string,
    message: string,
    readonly code?: number,
  ) {
    super(`CNI ${plugin} ${command}: ${message}`);
  }
}

export function findPlugin(binDirs: readonly string[], type: string): string | undefined {
  // A plugin type is a file name, never a path (a network config must not run /bin/sh).
  if (!/^[A-Za-z0-9_.-]+$/.test(type)) return undefined;
  return findExecutable(binDirs, type);
}

/** The first `dirs/name` this process may execute, or undefined. */
export function findExecutable(dirs: readonly string[], name: string): string | undefined {
  for (const dir of dirs) {
    const file = path.join(dir, name);
    try {
      fs.accessSync(file, fs.constants.X_OK);
      return file;
    } catch {
      // not in this directory
    }
  }
  return undefined;
}

/** Run one plugin once. */
export function execPlugin(
  binDirs: readonly string[],
  command: 'ADD' | 'DEL' | 'CHECK',
  config: Record<string, unknown> & { type: string },
  target: CniTarget,
  niceness = 0,
): Promise<CniResult | undefined> {
  const binary = findPlugin(binDirs, config.type);
  if (!binary) {
    return Promise.reject(new CniError(config.type, command, `plugin not found in ${binDirs.join(':')} (Debian package containernetworking-plugins)`));
  }
  const cniArgs = ['IgnoreUnknown=1', ...Object.entries(target.args).map(([k, v]) => `${k}=${v}`)].join(';');
  return new Promise((resolve, reject) => {
    const child = spawn(binary, [], {
      env: {
        PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin',
        CNI_COMMAND: command,
        CNI_CONTAINERID: target.containerId,
        CNI_NETNS: target.netns,
        CNI_IFNAME: target.ifName,
        CNI_ARGS: cniArgs,
        CNI_PATH: binDirs.join(':'),
      },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    if (niceness && child.pid) {
      try {
        // Work done ahead of need (a spare sandbox) must not take the CPU from a pod starting now.
        os.setPriority(child.pid, niceness);
      } catch {
        // already gone, or not allowed: it runs at the agent's priority
      }
    }
    let stdout = '';
    let stderr = '';
    const timer = setTimeout(() => child.kill('SIGKILL'), PLUGIN_TIMEOUT_MS);
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('error', (error) => {
      clearTimeout(timer);
      reject(new CniError(config.type, command, error.message));
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) {
        if (!stdout.trim()) return resolve(undefined);
        try {
          return resolve(JSON.parse(stdout) as CniResult);
        } catch {
          return reject(new CniError(config.type, command, `unreadable result: ${stdout.slice(0, 200)}`));
        }
      }
      let message = signal ? `killed by ${signal} (timed out after ${PLUGIN_TIMEOUT_MS} ms?)` : `exit code ${code}`;
      let errorCode: number | undefined;
      try {
        const parsed = JSON.parse(stdout) as { code?: number; msg?: string; details?: string };
        errorCode = parsed.code;
        message = [parsed.msg, parsed.details].filter(Boolean).join(': ') || message;
      } catch {
        if (stderr.trim()) message = `${message}: ${stderr.trim().slice(0, 300)}`;
      }
      reject(new CniError(config.type, command, message, errorCode));
    });
    child.stdin.on('error', () => undefined);
    child.stdin.end(JSON.stringify(config));
  });
}

/** A plugin's configuration as the runtime hands it over: the list's version and name, runtimeConfig for what it declared. */
function pluginConfig(
  list: NetworkConfigList,
  plugin: NetworkConfigList['plugins'][number],
  runtimeConfig: Record<string, unknown>,
  prevResult: CniResult | undefined,
): Record<string, unknown> & { type: string } {
  const wanted: Record<string, unknown> = {};
  for (const [capability, on] of Object.entries(plugin.capabilities ?? {})) {
    if (on && runtimeConfig[capability] !== undefined) wanted[capability] = runtimeConfig[capability];
  }
  return {
    ...plugin,
    cniVersion: list.cniVersion,
    name: list.name,
    ...(Object.keys(wanted).length ? { runtimeConfig: wanted } : {}),
    ...(prevResult ? { prevResult } : {}),
  };
}

/** ADD every plugin of the list in order; the last result is the network's. */
export async function addNetworkList(
  binDirs: readonly string[],
  list: NetworkConfigList,
  target: CniTarget,
  runtimeConfig: Record<string, unknown>,
  options: { prevResult?: CniResult; niceness?: number } = {},
): Promise<CniResult> {
  let result: CniResult | undefined = options.prevResult;
  for (const plugin of list.plugins) {
    result = (await execPlugin(binDirs, 'ADD', pluginConfig(list, plugin, runtimeConfig, result), target, options.niceness)) ?? result;
  }
  if (!result) throw new CniError(list.name, 'ADD', 'no plugin returned a result');
  return result;
}

/**
 * DEL every plugin of the list in reverse, each given the ADD's result. Plugins succeed on what
 * is already gone, so this is safe to repeat; every plugin is asked even when one fails, and the
 * first failure is thrown at the end (the caller keeps its cache to try again).
 */
export async function delNetworkList(
  binDirs: readonly string[],
  list: NetworkConfigList,
  target: CniTarget,
  runtimeConfig: Record<string, unknown>,
  prevResult: CniResult | undefined,
): Promise<void> {
  let failure: unknown;
  for (const plugin of [...list.plugins].reverse()) {
    try {
      await execPlugin(binDirs, 'DEL', pluginConfig(list, plugin, runtimeConfig, prevResult), target);
    } catch (error) {
      failure ??= error;
    }
  }
  if (failure) throw failure;
}

/** The first IPv4 address of a result, without its prefix. */
export function resultIpv4(result: CniResult): string | undefined {
  for (const ip of result.ips ?? []) {
    const address = ip.address.split('/')[0]!;
    if (/^\d+\.\d+\.\d+\.\d+$/.test(address)) return address;
  }
  return undefined;
}
