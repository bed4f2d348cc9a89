/**
 * Taints and tolerations as stored on Nodes and pods (core/v1 Taint and Toleration, wire form:
 * `timeAdded` is an RFC 3339 string). One type for the node-taint setting, the scheduler and the
 * node lifecycle controller.
 */

export type TaintEffect = 'NoSchedule' | 'PreferNoSchedule' | 'NoExecute';

export const TAINT_EFFECTS: readonly TaintEffect[] = ['NoSchedule', 'PreferNoSchedule', 'NoExecute'];

export interface Taint {
  key: string;
  value?: string;
  effect: TaintEffect;
  timeAdded?: string;
}

export interface Toleration {
  key?: string;
  operator?: 'Exists' | 'Equal' | string;
  value?: string;
  effect?: string;
  tolerationSeconds?: number | null;
}
