import { ApiError } from '../apiserver/errors.js';
import type { KubeObject } from '../apiserver/objects.js';
import { type ApiClient, RUNTIME_CLASSES } from '../client/types.js';
import type { Logger } from '../logging/logger.js';
import { BUILT_IN_RUNTIME_CLASSES, builtInRuntimeClass } from '../node-protocol/runtime-classes.js';

/**
 * The built-in RuntimeClasses (`runc`, `process`), brought back at every server start as the
 * default RBAC roles are: a missing one is created. A stored one keeps what an administrator gave
 * it (overhead, scheduling); its handler is immutable, so one stored with another handler (made
 * by hand before an upgrade) is left alone and said so in the log. They cannot be deleted
 * (src/apiserver/kinds/runtime-classes.ts), so this normally creates them once per cluster.
 * Several servers may start at once: a 409 means another created it first.
 */
export async function reconcileBuiltInRuntimeClasses(client: ApiClient, logger: Logger): Promise<void> {
  for (const name of BUILT_IN_RUNTIME_CLASSES) {
    const wanted = builtInRuntimeClass(name)!;
    const stored = await client.get(RUNTIME_CLASSES, undefined, name);
    if (stored) {
      if (stored.handler !== wanted.handler) {
        logger.warn({ runtimeClass: name, handler: stored.handler, builtInHandler: wanted.handler }, 'the built-in RuntimeClass has another handler; left as it is');
      }
      continue;
    }
    try {
      await client.create(RUNTIME_CLASSES, undefined, wanted as unknown as KubeObject);
      logger.debug({ runtimeClass: name }, 'created a built-in RuntimeClass');
    } catch (error) {
      if (!(error instanceof ApiError && error.code === 409)) throw error;
    }
  }
}
