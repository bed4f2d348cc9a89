import { followingClient } from '../../client/following.js';
import type { ApiClient } from '../../client/types.js';
import type { PeerPullStats, PeerSource } from '../../images/registry/peers.js';
import type { RegistriesConfig } from '../../images/registry/registries.js';
import type { ImageStore } from '../../images/store.js';
import type { Logger } from '../../logging/logger.js';
import type { AgentMetrics } from '../../metrics/metrics.js';
import { type PeerCredentials, PeerDirectory } from './directory.js';
import { AdvertisementPublisher } from './publisher.js';

/**
 * The embedded registry's cluster side on one node, by that node's own settings: with
 * `embedded-registry` on, it advertises its images (publisher.ts); with any registry listed
 * under `mirrors` in its registries.yaml, it pulls through peers (directory.ts), whether or not
 * it serves itself.
 */

export interface RegistryPeersOptions {
  client: () => ApiClient;
  nodeName: string;
  nodeUid: () => string;
  credentials: () => PeerCredentials | undefined;
  store: ImageStore;
  /** This node's own `embedded-registry` setting. */
  serve: boolean;
  registries: RegistriesConfig;
  metrics: () => AgentMetrics | undefined;
  logger: Logger;
}

export interface RegistryPeers {
  /** For the image puller: undefined when registries.yaml lists no mirrors. */
  pullThrough: { source: PeerSource; stats: PeerPullStats } | undefined;
  publisher: AdvertisementPublisher | undefined;
  stop(): void;
}

export async function startRegistryPeers(options: RegistryPeersOptions): Promise<RegistryPeers> {
  const client = followingClient(options.client);
  const publisher = options.serve
    ? new AdvertisementPublisher({ client, nodeName: options.nodeName, nodeUid: options.nodeUid, store: options.store, logger: options.logger })
    : undefined;
  publisher?.start();
  let directory: PeerDirectory | undefined;
  if (options.registries.mirrors.size > 0) {
    directory = new PeerDirectory({ client, nodeName: options.nodeName, credentials: options.credentials, logger: options.logger });
    await directory.start();
  }
  const metrics = options.metrics;
  const stats: PeerPullStats = {
    hit: () => metrics()?.registryPeerHits.inc(),
    miss: () => metrics()?.registryPeerMisses.inc(),
    fallback: () => metrics()?.registryPeerFallbacks.inc(),
    corrupt: () => metrics()?.registryCorruptBlobs.inc({ detected_by: 'puller' }),
  };
  return {
    pullThrough: directory ? { source: directory, stats } : undefined,
    publisher,
    stop() {
      publisher?.stop();
      directory?.stop();
    },
  };
}
