import { labelRecord, type NodeLabel } from '../config/schema.js';
import { parseReservation } from '../node-protocol/node-resources.js';
import type { Taint } from '../node-protocol/taints.js';
import type { AgentOptions } from './agent.js';

/** The node-scoped settings an agent runs with, the same for `drover agent` and a server's own agent. */
export interface NodeSettings {
  nodeName: string;
  nodeLabels: readonly NodeLabel[];
  nodeTaints: Taint[];
  agentPort: number;
  nodeIp?: string | undefined;
  shutdownGracePeriodMs: number;
  supervisorMetrics: boolean;
  embeddedRegistry: boolean;
  privateRegistry: string;
  imageGcHighThreshold: number;
  imageGcLowThreshold: number;
  systemReserved: string;
}

/** The part of AgentOptions that comes from the node's own settings (never from another server). */
export function agentOptionsOf(
  settings: NodeSettings,
): Pick<
  AgentOptions,
  | 'nodeName'
  | 'labels'
  | 'taints'
  | 'agentPort'
  | 'nodeIp'
  | 'shutdownGracePeriodMs'
  | 'supervisorMetrics'
  | 'embeddedRegistry'
  | 'privateRegistry'
  | 'imageGc'
  | 'systemReserved'
> {
  return {
    nodeName: settings.nodeName,
    labels: labelRecord(settings.nodeLabels),
    taints: settings.nodeTaints,
    agentPort: settings.agentPort,
    ...(settings.nodeIp ? { nodeIp: settings.nodeIp } : {}),
    shutdownGracePeriodMs: settings.shutdownGracePeriodMs,
    supervisorMetrics: settings.supervisorMetrics,
    embeddedRegistry: settings.embeddedRegistry,
    privateRegistry: settings.privateRegistry,
    imageGc: { highThresholdPercent: settings.imageGcHighThreshold, lowThresholdPercent: settings.imageGcLowThreshold },
    // Checked when the configuration was resolved (exit 78 on a bad entry).
    systemReserved: parseReservation([settings.systemReserved]).reserved,
  };
}
