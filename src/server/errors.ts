/** A server configuration that cannot work (exit code 78, like any bad configuration). */
export class ServerConfigError extends Error {
  override name = 'ServerConfigError';
}
