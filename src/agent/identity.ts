import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { writeFileAtomic } from '../security/files.js';
import { generateSecret } from '../security/tokens.js';

/**
 * What makes this host this node, kept in the agent's data dir: a random node id (the
 * providerID) and the node password that binds the node name to this host on the server.
 */

export interface NodeIdentity {
  nodeId: string;
  password: string;
}

function readOrCreate(file: string, create: () => string, mode: number): string {
  if (fs.existsSync(file)) {
    const value = fs.readFileSync(file, 'utf8').trim();
    if (value) return value;
  }
  const value = create();
  writeFileAtomic(file, `${value}\n`, mode);
  return value;
}

export function loadOrCreateIdentity(agentDir: string): NodeIdentity {
  return {
    nodeId: readOrCreate(path.join(agentDir, 'node-id'), randomUUID, 0o644),
    password: readOrCreate(path.join(agentDir, 'node-password'), () => generateSecret(16), 0o600),
  };
}

function readFirst(files: string[]): string {
  for (const file of files) {
    try {
      const value = fs.readFileSync(file, 'utf8').trim();
      if (value) return value;
    } catch {
      // try the next one
    }
  }
  return '';
}

export interface SystemInfo {
  machineID: string;
  bootID: string;
  kernelVersion: string;
  osImage: string;
  operatingSystem: string;
  architecture: string;
}

export function systemInfo(): SystemInfo {
  const osRelease = readFirst(['/etc/os-release', '/usr/lib/os-release']);
  const pretty = /^PRETTY_NAME="?([^"\n]*)"?$/m.exec(osRelease)?.[1] ?? os.type();
  return {
    machineID: readFirst(['/etc/machine-id', '/var/lib/dbus/machine-id']),
    bootID: readFirst(['/proc/sys/kernel/random/boot_id']),
    kernelVersion: os.release(),
    osImage: pretty,
    operatingSystem: process.platform,
    architecture: process.arch === 'x64' ? 'amd64' : process.arch,
  };
}

/** The address other nodes and the server reach this one at: the first non-internal IPv4. */
export function defaultNodeIp(): string {
  for (const addresses of Object.values(os.networkInterfaces())) {
    for (const address of addresses ?? []) {
      if (address.family === 'IPv4' && !address.internal) return address.address;
    }
  }
  return '127.0.0.1';
}
