import type { ResourceDefinition } from '../definition.js';
import { CONFIGMAP_DEFINITION } from './configmaps.js';
import { PDB_DEFINITION } from './disruption-budgets.js';
import { CORE_EVENT_DEFINITION, EVENTS_V1_DEFINITION } from './events.js';
import { LEASE_DEFINITION } from './leases.js';
import { NAMESPACE_DEFINITION } from './namespaces.js';
import { NODE_DEFINITION } from './nodes.js';
import { POD_DEFINITION } from './pods.js';
import { RBAC_DEFINITIONS } from './rbac.js';
import { REVIEW_DEFINITIONS } from './reviews.js';
import { RUNTIME_CLASS_DEFINITION } from './runtime-classes.js';
import { SECRET_DEFINITION } from './secrets.js';
import { SERVICE_ACCOUNT_DEFINITION } from './service-accounts.js';
import { SERVICE_DEFINITION } from './services.js';
import { ENDPOINTS_DEFINITION, ENDPOINT_SLICE_DEFINITION } from './endpoints.js';
import { DEPLOYMENT_DEFINITION, REPLICASET_DEFINITION, STATEFULSET_DEFINITION } from './workloads.js';
import { DAEMONSET_DEFINITION } from './daemonsets.js';
import { CONTROLLER_REVISION_DEFINITION } from './controller-revisions.js';
import { JOB_DEFINITION } from './jobs.js';
import { CRONJOB_DEFINITION, CRONJOB_V1BETA1_DEFINITION } from './cronjobs.js';

/**
 * Every kind Drover serves, one definition each (data and strategy hooks), in discovery order.
 * Adding a kind is adding its file here and its entry below (docs/architecture.md, "How to add
 * a kind").
 */
export const RESOURCES: readonly ResourceDefinition[] = [
  NAMESPACE_DEFINITION,
  NODE_DEFINITION,
  POD_DEFINITION,
  CORE_EVENT_DEFINITION,
  EVENTS_V1_DEFINITION,
  LEASE_DEFINITION,
  CONFIGMAP_DEFINITION,
  SECRET_DEFINITION,
  SERVICE_ACCOUNT_DEFINITION,
  SERVICE_DEFINITION,
  ENDPOINTS_DEFINITION,
  ENDPOINT_SLICE_DEFINITION,
  DEPLOYMENT_DEFINITION,
  REPLICASET_DEFINITION,
  STATEFULSET_DEFINITION,
  DAEMONSET_DEFINITION,
  CONTROLLER_REVISION_DEFINITION,
  JOB_DEFINITION,
  CRONJOB_DEFINITION,
  CRONJOB_V1BETA1_DEFINITION,
  PDB_DEFINITION,
  RUNTIME_CLASS_DEFINITION,
  ...RBAC_DEFINITIONS,
  ...REVIEW_DEFINITIONS,
];
