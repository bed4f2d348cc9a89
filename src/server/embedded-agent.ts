import { Agent } from '../agent/agent.js';
import type { LocalClient } from '../client/local.js';
import { NODES } from '../client/types.js';
import type { ApiServerDirectory } from '../cluster/apiservers.js';
import { agentOptionsOf } from '../agent/node-settings.js';
import type { ServerSettings } from '../config/schema.js';
import type { Logger } from '../logging/logger.js';
import { CONTROL_PLANE_ROLE_LABEL, ETCD_ROLE_LABEL } from '../node-protocol/names.js';

/**
 * The agent for this server's own node (unless `disable-agent`): it joins through this server's
 * own URL with the join token, like any agent, and runs in the background; the server does not
 * wait for it. The server writes the node's role labels itself (node restriction keeps them from
 * the node).
 */

export interface EmbeddedAgentInput {
  settings: ServerSettings;
  dataDir: string;
  /** This server's own URL; undefined on an etcd-only server (no API of its own). */
  ownUrl: string | undefined;
  joinToken: string;
  /** Role labels: control-plane when this server runs the API, etcd when it runs a member. */
  controlPlane: boolean;
  etcdMember: boolean;
  client: LocalClient;
  directory: ApiServerDirectory;
  logger: Logger;
}

export interface EmbeddedAgent {
  /** Its planned shutdown and drain, waited for at most `limitMs`; an agent still starting is told not to. */
  stop(reason: string, limitMs: number): Promise<void>;
}

export function startEmbeddedAgent(input: EmbeddedAgentInput): EmbeddedAgent {
  const { settings, client, directory, logger } = input;
  let agent: Agent | undefined;
  let stopped = false;
  const roleLabels: Record<string, string> = {
    ...(input.controlPlane ? { [CONTROL_PLANE_ROLE_LABEL]: 'true' } : {}),
    ...(input.etcdMember ? { [ETCD_ROLE_LABEL]: 'true' } : {}),
  };
  void (async () => {
    // Its own API when it has one; an etcd-only server's agent registers through whichever
    // control-plane server exists (its settings stay its own: only the URL is borrowed).
    const url = input.ownUrl ?? (await waitForControlPlane(directory, logger, () => stopped));
    if (stopped || !url) return;
    agent = new Agent({
      server: url,
      token: input.joinToken,
      ...agentOptionsOf(settings),
      dataDir: input.dataDir,
      logger: logger.child({ component: 'agent' }),
      // Role labels are not the node's to set (node restriction): the server writes them itself.
      onNodeRegistered: async (node) => {
        if (Object.entries(roleLabels).every(([key, value]) => node.metadata.labels?.[key] === value)) return;
        await client.patch(NODES, undefined, settings.nodeName, 'merge', { metadata: { labels: roleLabels } });
      },
    });
    await agent.start();
  })().catch((error: unknown) => logger.error({ err: error }, 'the embedded agent failed to start'));
  return {
    stop: async (reason, limitMs) => {
      stopped = true;
      if (agent) await Promise.race([agent.shutdown(reason), new Promise((r) => setTimeout(r, limitMs).unref())]);
    },
  };
}

/** The URL of some control-plane server, waiting (and saying so) until one has announced itself. */
async function waitForControlPlane(directory: ApiServerDirectory, logger: Logger, stopped: () => boolean): Promise<string | undefined> {
  for (let attempt = 0; !stopped(); attempt++) {
    const live = await directory.live().catch(() => []);
    if (live.length) return live[0]!.url;
    if (attempt % 10 === 0) logger.info('etcd-only server: waiting for a control-plane server to register this node through');
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
  return undefined;
}
