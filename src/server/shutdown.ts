import type { ApiServer } from '../apiserver/server.js';
import type { ApiServerDirectory } from '../cluster/apiservers.js';
import type { ManagedEtcd } from '../cluster/managed-etcd.js';
import type { NodeConfigGraph } from '../cluster/node-graph.js';
import type { NodeRegistry } from '../cluster/node-registry.js';
import type { RbacCache } from '../cluster/rbac-cache.js';
import type { SecretsEncryption } from '../cluster/secrets-encryption.js';
import type { ShutdownTimings } from '../config/timings.js';
import type { Datastore } from '../datastore/types.js';
import type { Logger } from '../logging/logger.js';
import type { ControllerManager } from '../controllers/controller-manager.js';
import type { EmbeddedAgent } from './embedded-agent.js';
import type { DataDirLock } from './lock.js';

/**
 * `stop()` of a running server (docs/architecture.md#shutdown), in this order: the embedded
 * agent's planned shutdown and drain (its node shows Down, and this server's controllers, if it
 * leads, are still there to create the replacements the drain waits for); the compaction timer
 * and this server's entry in the server directory; the controllers, then the controller lease
 * (released), and the node registry's, node graph's, RBAC cache's and token authenticator's watches; the listener, requests in
 * flight, then every connection; the datastore, the managed etcd member, the lock. Called any
 * number of times, it runs once.
 */

export interface ServerParts {
  logger: Logger;
  timings: ShutdownTimings;
  embeddedAgent: EmbeddedAgent | undefined;
  compactor: NodeJS.Timeout;
  directory: ApiServerDirectory;
  controllers: ControllerManager;
  nodeRegistry: NodeRegistry;
  nodeGraph: NodeConfigGraph;
  rbac: RbacCache;
  /** The watch that serves CustomResourceDefinitions' kinds. */
  crds: { stop(): void };
  /** Its informers of ServiceAccounts and bound objects. */
  serviceAccountAuthenticator: { stop(): void };
  api: ApiServer;
  /** Secrets encryption at rest's key follower, when this server serves the API. */
  encryption: SecretsEncryption | undefined;
  datastore: Datastore;
  managedEtcd: ManagedEtcd | undefined;
  lock: DataDirLock;
}

export function shutdownSequence(parts: ServerParts): () => Promise<void> {
  const { logger, timings } = parts;
  let stopping: Promise<void> | undefined;
  return () => {
    stopping ??= (async () => {
      await parts.embeddedAgent?.stop('server shutdown', timings.embeddedAgentStopMs);
      logger.info('shutting down: closing listeners and waiting for requests in flight');
      clearInterval(parts.compactor);
      // Courtesies to the rest of the cluster, bounded: a datastore without quorum must not hold
      // the shutdown hostage.
      const bounded = (work: Promise<void>): Promise<unknown> =>
        Promise.race([work, new Promise((resolve) => setTimeout(resolve, timings.courtesyMs).unref())]);
      await bounded(parts.directory.stop());
      await bounded(parts.controllers.stop());
      parts.nodeRegistry.stop();
      parts.nodeGraph.stop();
      parts.rbac.stop();
      parts.crds.stop();
      parts.serviceAccountAuthenticator.stop();
      await parts.api.close(timings.requestDrainMs);
      await parts.encryption?.stop();
      await parts.datastore.close();
      await parts.managedEtcd?.stop();
      parts.lock.release();
      logger.info('shutdown complete');
    })();
    return stopping;
  };
}
