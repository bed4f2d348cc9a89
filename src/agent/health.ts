import fs from 'node:fs';
import type { AgentHealth } from '../node-protocol/records.js';
import type { Logger } from '../logging/logger.js';

/**
 * The agent's own health: whether it can keep its data dir (writable, not full). Every lease
 * renewal carries it to the control plane (which turns it into the Ready condition), and the
 * agent's endpoint answers `/healthz` with it.
 */

const HEALTHY: AgentHealth = { ready: true, reason: 'AgentReady', message: 'Drover agent is healthy.' };

export class HealthCheck {
  private health: AgentHealth = HEALTHY;

  constructor(
    private readonly agentDir: string,
    private readonly logger: Logger,
  ) {}

  get current(): AgentHealth {
    return this.health;
  }

  /** Look again; a change is logged. */
  check(): void {
    let next: AgentHealth = HEALTHY;
    try {
      fs.accessSync(this.agentDir, fs.constants.W_OK);
      const stats = fs.statfsSync(this.agentDir);
      if (stats.bavail / stats.blocks < 0.01) {
        next = { ready: false, reason: 'DiskPressure', message: `less than 1% free space on ${this.agentDir}` };
      }
    } catch (error) {
      next = { ready: false, reason: 'DataDirUnavailable', message: `agent data dir ${this.agentDir}: ${(error as Error).message}` };
    }
    if (next.ready !== this.health.ready || next.reason !== this.health.reason) {
      this.logger.warn({ ready: next.ready, reason: next.reason }, next.message);
    }
    this.health = next;
  }
}
