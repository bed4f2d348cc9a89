import net from 'node:net';
import type { PodRunSpec } from '../pods/run-spec.js';

/**
 * Where `kubectl port-forward` connects on this node: a TCP connection to `port` of the pod. Until
 * pods have network namespaces of their own (issue 15), every pod shares the host's, so the pod's
 * port is the host's loopback port; issue 15 changes only this function (it will connect inside
 * the pod's network namespace, `<pod dir>/ns/net`).
 */

export class PortForwardError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PortForwardError';
  }
}

/** How long a connection to the pod's port may take. */
const CONNECT_TIMEOUT_MS = 10_000;

/**
 * The pod's address: on the pod network its own (a server in the pod listening on all addresses
 * is reached; one bound to the pod's loopback only is not, where containerd would enter the pod's
 * namespace); in the node's network the loopback address.
 */
export function dialPodPort(_podDir: string, spec: PodRunSpec, port: number): Promise<net.Socket> {
  const host = spec.podNetwork?.podIp ?? '127.0.0.1';
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host, port });
    const timer = setTimeout(() => socket.destroy(new Error(`connect: timed out after ${CONNECT_TIMEOUT_MS} ms`)), CONNECT_TIMEOUT_MS);
    socket.once('connect', () => {
      clearTimeout(timer);
      resolve(socket);
    });
    socket.once('error', (error: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      const why = error.code === 'ECONNREFUSED' ? 'connect: connection refused' : error.message;
      reject(new PortForwardError(`error forwarding port ${port} to pod ${spec.namespace}/${spec.name}, uid ${spec.uid}: dial tcp4 ${host}:${port}: ${why}`));
    });
  });
}
