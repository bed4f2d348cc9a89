/**
 * The two JSON records an agent hands the control plane besides its lease renewals. Both are
 * parsed leniently: a record that does not parse counts as absent, never as an error.
 */

/** The agent's own health, sent with every renewal (HEALTH_ANNOTATION on its Lease). */
export interface AgentHealth {
  ready: boolean;
  reason: string;
  message: string;
}

/**
 * Written by the agent on SIGTERM before it stops (SHUTDOWN_ANNOTATION on its Node, and
 * `<data-dir>/agent/shutdown.json`): the durable announcement of a planned stop.
 */
export interface ShutdownRecord {
  reason: string;
  /** RFC 3339. */
  time: string;
  plannedDurationSeconds?: number;
  /** The shutdown cordoned the node, so a restart should uncordon it. */
  cordoned: boolean;
}

function parseJson<T>(text: string | undefined): T | undefined {
  if (!text) return undefined;
  try {
    return JSON.parse(text) as T;
  } catch {
    return undefined;
  }
}

export function parseShutdownRecord(text: string | undefined): ShutdownRecord | undefined {
  return parseJson<ShutdownRecord>(text);
}

export function parseAgentHealth(text: string | undefined): AgentHealth | undefined {
  return parseJson<AgentHealth>(text);
}
