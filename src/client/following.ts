import type { ApiClient } from './types.js';

/**
 * A client that delegates each call to whichever client `current` returns now: an agent moves
 * between servers and replaces its client, and informers built on this one keep working.
 */
export function followingClient(current: () => ApiClient): ApiClient {
  return {
    get: (...args) => current().get(...args),
    list: (...args) => current().list(...args),
    create: (...args) => current().create(...args),
    update: (...args) => current().update(...args),
    patch: (...args) => current().patch(...args),
    delete: (...args) => current().delete(...args),
    evict: (...args) => current().evict(...args),
    requestToken: (...args) => current().requestToken(...args),
    watch: (...args) => current().watch(...args),
  };
}
