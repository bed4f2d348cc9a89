/**
 * The timings an agent and the controller leader must agree on for singletons to be safe (see
 * docs/failover.md): the defaults of the three cluster timing settings, the margin the controller
 * adds before it replaces a singleton, and the silences the outage rule compares on both sides.
 */

/** `node-lease-renew-interval`'s default. */
export const DEFAULT_NODE_LEASE_RENEW_INTERVAL_MS = 1000;
/** `node-monitor-grace-period`'s default. */
export const DEFAULT_NODE_MONITOR_GRACE_PERIOD_MS = 4000;
/** `fencing-timeout`'s default: three quarters of the default grace. */
export const DEFAULT_FENCING_TIMEOUT_MS = 3000;

/**
 * The fencing timeout an agent uses: the one its server sent at registration. A server that sends
 * none (one from before `fencing-timeout` was a setting) gets the default's share of its grace
 * period, which is the default at the default grace and stays shorter than any grace.
 */
export function fencingTimeoutOf(timings: { nodeMonitorGracePeriodMs: number; fencingTimeoutMs?: number | undefined }): number {
  return timings.fencingTimeoutMs ?? Math.floor((timings.nodeMonitorGracePeriodMs * DEFAULT_FENCING_TIMEOUT_MS) / DEFAULT_NODE_MONITOR_GRACE_PERIOD_MS);
}

/**
 * Not a fencing timeout the cluster chose, and deliberately not DEFAULT_FENCING_TIMEOUT_MS: what
 * a singleton's supervisor waits, from its own start, when it has never been able to read its
 * node's fencing file (so it knows neither the cluster's fencing timeout nor any confirmed
 * renewal). It is the default grace period, so the pod is gone no later than a server with
 * default timings would declare the node lost.
 */
export const FENCING_TIMEOUT_WITHOUT_FILE_MS = DEFAULT_NODE_MONITOR_GRACE_PERIOD_MS;

/**
 * What the controller adds to fencing-timeout before it replaces a singleton: the supervisor's
 * undecided phase and last round of questions (0.8 s), its 100 ms check, the kill itself, clock
 * rate drift between hosts, and a supervisor starved of CPU for a moment on a busy host.
 */
export const FENCING_MARGIN_MS = 2000;

/**
 * The two silences that must line up for the outage rule (docs/failover.md): a node's supervisor
 * counts a peer as cut off when the peer's last confirmed renewal is older than `peerCutOffMs`;
 * the controller counts a node as silent when it has seen no renewal from it for longer than
 * `controllerSilenceMs`, shorter by what a renewal may take from its sending to the controller's
 * watch. Whenever a supervisor finds a majority cut off, the controller finds a majority silent.
 */
export function fencingThresholds(renewMs: number, fencingMs: number): { peerCutOffMs: number; controllerSilenceMs: number } {
  const peerCutOffMs = Math.max(renewMs, fencingMs - renewMs);
  return { peerCutOffMs, controllerSilenceMs: peerCutOffMs - Math.min(500, peerCutOffMs / 4) };
}
