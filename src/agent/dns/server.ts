import { slimServiceObject } from '../network/service-model.js';
import { followingClient } from '../../client/following.js';
import dgram from 'node:dgram';
import fs from 'node:fs';
import net from 'node:net';
import { Informer } from '../../client/informer.js';
import { type ApiClient, ENDPOINTSLICES, SERVICES } from '../../client/types.js';
import type { Logger } from '../../logging/logger.js';
import type { ServiceNetwork } from '../../node-protocol/service-network.js';
import { type DnsAddressOptions, type DnsAddressState, ensureDnsAddress, removeDnsAddress } from './address.js';
import { Forwarder } from './forwarder.js';
import { buildSnapshot, type DnsSnapshot } from './records.js';
import { DnsResponder } from './responder.js';
import { parseUpstream, type Upstream, upstreamsFromResolvConf } from './upstreams.js';

/**
 * The node's cluster DNS server: UDP and TCP port 53 on the `cluster-dns` address, which it puts
 * on its own device (address.ts). Names in the cluster domain are answered from the Services and
 * EndpointSlices its informers follow (records.ts); the rest is forwarded (forwarder.ts).
 */

export interface ClusterDnsOptions {
  /** The node's client now (the agent may move to another server); informers follow it. */
  client: () => ApiClient;
  network: ServiceNetwork;
  logger: Logger;
  /** Upstream resolvers (`ip`, `ip:port`, `[ipv6]:port`); default: the usable ones of `resolvConf`. */
  upstreams?: string[];
  /** Default /etc/resolv.conf. */
  resolvConf?: string;
  /** Default 53. */
  port?: number;
  /** Default `drover-dns`. */
  device?: string;
  /** Per upstream try, default 2000 ms (then the next upstream). */
  upstreamTimeoutMs?: number;
  /** The `ip` binary. */
  ip?: string;
}

const TCP_IDLE_MS = 10_000;

export class ClusterDns {
  private readonly logger: Logger;
  private readonly address: string;
  private readonly port: number;
  private readonly addressOptions: DnsAddressOptions;
  private readonly client: ApiClient;
  /** Made at each start (an informer once stopped stays stopped): a stopped ClusterDns may start again. */
  private services: Informer;
  private slices: Informer;
  private snapshot: DnsSnapshot | undefined;
  private forwarder: Forwarder | undefined;
  private responder: DnsResponder | undefined;
  private udp: dgram.Socket | undefined;
  private tcp: net.Server | undefined;
  private readonly connections = new Set<net.Socket>();
  private addressState: DnsAddressState | undefined;
  private started = false;
  private starting: Promise<void> | undefined;

  constructor(private readonly options: ClusterDnsOptions) {
    this.logger = options.logger.child({ component: 'cluster-dns' });
    this.address = options.network.clusterDns;
    this.port = options.port ?? 53;
    this.addressOptions = { address: this.address, logger: this.logger, ...(options.device ? { device: options.device } : {}), ...(options.ip ? { ip: options.ip } : {}) };
    this.client = followingClient(options.client);
    [this.services, this.slices] = this.informers();
  }

  private informers(): [Informer, Informer] {
    const changed = (): void => {
      this.snapshot = undefined;
    };
    return [
      new Informer(this.client, SERVICES, undefined, changed, this.logger, {}, slimServiceObject),
      new Informer(this.client, ENDPOINTSLICES, undefined, changed, this.logger, {}, slimServiceObject),
    ];
  }

  /** The upstreams in use (after start). */
  get upstreams(): Upstream[] {
    return this.forwarder?.upstreams ?? [];
  }

  /** Both lists are in: cluster names are answered (SERVFAIL before, rather than a false NXDOMAIN). */
  get synced(): boolean {
    return this.services.hasSynced && this.slices.hasSynced;
  }

  async start(): Promise<void> {
    if (this.started) return;
    this.started = true;
    [this.services, this.slices] = this.informers();
    this.snapshot = undefined;
    const upstreams = this.options.upstreams
      ? this.options.upstreams.map(parseUpstream)
      : upstreamsFromResolvConf(readResolvConf(this.options.resolvConf ?? '/etc/resolv.conf', this.logger), this.address);
    if (upstreams.length === 0) this.logger.warn('no usable upstream resolver (loopback ones are skipped): names outside the cluster get SERVFAIL');
    this.forwarder = new Forwarder({ upstreams, timeoutMs: this.options.upstreamTimeoutMs ?? 2000, logger: this.logger });
    this.responder = new DnsResponder({
      network: this.options.network,
      snapshot: () => (this.synced ? this.current() : undefined),
      forwarder: this.forwarder,
      logger: this.logger,
    });
    this.starting = this.bind();
    await this.starting;
    // Serving already (outside names are forwarded, cluster names SERVFAIL until the first lists).
    await Promise.all([this.services.start(), this.slices.start()]);
    this.logger.info(
      {
        address: this.address,
        port: this.port,
        device: this.addressState?.device,
        ...(this.addressState?.createdType ? { deviceType: this.addressState.createdType } : {}),
        domain: this.options.network.clusterDomain,
        upstreams: upstreams.map((u) => `${u.family === 6 ? `[${u.address}]` : u.address}:${u.port}`),
      },
      'cluster DNS serving',
    );
  }

  /** The address on its device, and the sockets on it; undone when any step fails. */
  private async bind(): Promise<void> {
    try {
      this.addressState = await ensureDnsAddress(this.addressOptions);
      await this.listen();
    } catch (error) {
      await this.teardown();
      throw error;
    }
  }

  /** Closes the sockets and removes the address (its device); waits for a bind in progress first. */
  async stop(): Promise<void> {
    await this.starting?.catch(() => undefined);
    this.starting = undefined;
    await this.teardown();
  }

  private async teardown(): Promise<void> {
    this.services.stop();
    this.slices.stop();
    this.forwarder?.close();
    for (const socket of this.connections) socket.destroy();
    this.connections.clear();
    const udp = this.udp;
    this.udp = undefined;
    if (udp) await new Promise<void>((resolve) => udp.close(() => resolve()));
    const tcp = this.tcp;
    this.tcp = undefined;
    if (tcp) await new Promise<void>((resolve) => tcp.close(() => resolve()));
    if (this.started) {
      try {
        await removeDnsAddress(this.addressOptions, this.addressState);
      } catch (error) {
        this.logger.warn({ err: error }, 'cannot remove the cluster DNS address');
      }
    }
    this.addressState = undefined;
    this.started = false;
  }

  private async listen(): Promise<void> {
    const udp = dgram.createSocket({ type: 'udp4' });
    this.udp = udp;
    udp.on('message', (msg, rinfo) => {
      this.responder!.handle(msg, false).then(
        (reply) => {
          if (reply && this.udp === udp) udp.send(reply, rinfo.port, rinfo.address);
        },
        (error: unknown) => this.logger.warn({ err: error }, 'DNS query failed'),
      );
    });
    udp.on('error', (error) => this.logger.warn({ err: error }, 'DNS UDP socket error'));
    await new Promise<void>((resolve, reject) => {
      udp.once('error', reject);
      udp.bind({ address: this.address, port: this.port }, () => {
        udp.off('error', reject);
        resolve();
      });
    });
    const tcp = net.createServer((socket) => this.serveTcp(socket));
    this.tcp = tcp;
    await new Promise<void>((resolve, reject) => {
      tcp.once('error', reject);
      tcp.listen({ host: this.address, port: this.port }, () => {
        tcp.off('error', reject);
        resolve();
      });
    });
    tcp.on('error', (error) => this.logger.warn({ err: error }, 'DNS TCP server error'));
  }

  /** DNS over TCP: messages behind a two-byte length, several per connection, answered as they finish. */
  private serveTcp(socket: net.Socket): void {
    this.connections.add(socket);
    socket.setTimeout(TCP_IDLE_MS, () => socket.destroy());
    let buffered = Buffer.alloc(0);
    socket.on('data', (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      while (buffered.length >= 2 && buffered.length >= 2 + buffered.readUInt16BE(0)) {
        const message = buffered.subarray(2, 2 + buffered.readUInt16BE(0));
        buffered = buffered.subarray(2 + message.length);
        this.responder!.handle(Buffer.from(message), true).then(
          (reply) => {
            if (!reply || socket.destroyed) return;
            const length = Buffer.alloc(2);
            length.writeUInt16BE(reply.length);
            socket.write(Buffer.concat([length, reply]));
          },
          (error: unknown) => this.logger.warn({ err: error }, 'DNS query failed'),
        );
      }
    });
    socket.on('error', () => socket.destroy());
    socket.on('close', () => this.connections.delete(socket));
  }

  private current(): DnsSnapshot {
    this.snapshot ??= buildSnapshot(this.services.items(), this.slices.items(), this.options.network, Math.floor(Date.now() / 1000));
    return this.snapshot;
  }
}

function readResolvConf(file: string, logger: Logger): string {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch (error) {
    logger.warn({ err: error, file }, 'cannot read the node resolv.conf: no upstream resolvers');
    return '';
  }
}
