import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import type { Logger } from '../../logging/logger.js';

/**
 * The cluster-dns address on the node: a /32 on a device of its own (`drover-dns`) in the node's
 * network namespace, so the node and every pod routed through it reach the DNS server without a
 * Service rule, as NodeLocal DNSCache binds its address on a `nodelocaldns` dummy device.
 *
 * The device is a `dummy` where the kernel has that driver; a kernel built without it (no modules,
 * as on this project's CI machine) gets an `ifb`, the other always-up virtual device that carries
 * nothing by itself: either way only its local address matters.
 */

const run = promisify(execFile);

export const DNS_DEVICE = 'drover-dns';

export class DnsAddressError extends Error {
  override name = 'DnsAddressError';
}

export interface DnsAddressOptions {
  address: string;
  device?: string;
  /** The `ip` binary (iproute2). */
  ip?: string;
  logger: Logger;
}

export interface DnsAddressState {
  device: string;
  /** The device type in use (`dummy`, `ifb`), or undefined when it was there already. */
  createdType?: string;
  addedAddress: boolean;
}

async function ip(binary: string, args: string[]): Promise<string> {
  try {
    const { stdout } = await run(binary, args, { encoding: 'utf8' });
    return stdout;
  } catch (error) {
    const stderr = (error as { stderr?: string }).stderr?.trim();
    throw new DnsAddressError(`${binary} ${args.join(' ')}: ${stderr || (error as Error).message}`);
  }
}

async function deviceExists(binary: string, device: string): Promise<boolean> {
  try {
    await ip(binary, ['link', 'show', 'dev', device]);
    return true;
  } catch {
    return false;
  }
}

/** Whether `address` is a local address of any device in this namespace, and which. */
async function addressDevice(binary: string, address: string): Promise<string | undefined> {
  const links = JSON.parse(await ip(binary, ['-j', '-4', 'addr', 'show'])) as Array<{ ifname: string; addr_info?: Array<{ local?: string }> }>;
  return links.find((link) => link.addr_info?.some((info) => info.local === address))?.ifname;
}

/** Puts `address/32` on the device (made if missing) and brings it up. */
export async function ensureDnsAddress(options: DnsAddressOptions): Promise<DnsAddressState> {
  const binary = options.ip ?? 'ip';
  const device = options.device ?? DNS_DEVICE;
  const state: DnsAddressState = { device, addedAddress: false };
  if (!(await deviceExists(binary, device))) {
    const failures: string[] = [];
    for (const type of ['dummy', 'ifb']) {
      try {
        await ip(binary, ['link', 'add', device, 'type', type]);
        state.createdType = type;
        break;
      } catch (error) {
        failures.push((error as Error).message);
      }
    }
    if (!state.createdType) throw new DnsAddressError(`cannot create the cluster DNS device ${device}: ${failures.join('; ')}`);
    options.logger.debug({ device, type: state.createdType }, 'made the cluster DNS device');
  }
  await ip(binary, ['link', 'set', device, 'up']);
  const holder = await addressDevice(binary, options.address);
  if (holder === undefined) {
    await ip(binary, ['addr', 'add', `${options.address}/32`, 'dev', device]);
    state.addedAddress = true;
  } else if (holder !== device) {
    options.logger.warn({ address: options.address, device: holder }, 'the cluster DNS address is already on another device; serving there');
  }
  return state;
}

/**
 * Takes the address away again: the whole device when it is Drover's own (by name: one left by an
 * agent killed before it could clean up is removed too), else only an address this start added.
 */
export async function removeDnsAddress(options: DnsAddressOptions, state: DnsAddressState | undefined): Promise<void> {
  const binary = options.ip ?? 'ip';
  const device = state?.device ?? options.device ?? DNS_DEVICE;
  if (device === DNS_DEVICE || state?.createdType) {
    if (await deviceExists(binary, device)) await ip(binary, ['link', 'del', device]);
    return;
  }
  if (state?.addedAddress) await ip(binary, ['addr', 'del', `${options.address}/32`, 'dev', device]);
}
