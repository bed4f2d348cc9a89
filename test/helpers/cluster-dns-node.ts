/**
 * A ClusterDns (src/agent/dns/server.ts) as its own process, for tests and the DNS benchmark that
 * run it inside a network namespace they made (`ip netns exec <ns> node --import tsx this-file
 * '<json>'`): it puts cluster-dns on its device there, follows the API server with the given
 * credentials and serves until SIGTERM, when it stops (removing its device) and exits 0.
 * Prints one JSON line `{"ready":true,…}` once serving, and its logs (JSON lines) on stdout.
 * SIGUSR2 stops it and starts it again (the same ClusterDns object), then prints `{"restarted":n}`.
 */
import { ClusterDns } from '../../src/agent/dns/server.js';
import { HttpClient } from '../../src/client/http.js';
import { createLogger } from '../../src/logging/logger.js';
import { defaultServiceNetwork } from '../../src/node-protocol/service-network.js';

interface ChildConfig {
  server: string;
  caPem: string;
  token: string;
  upstreams?: string[];
  resolvConf?: string;
  upstreamTimeoutMs?: number;
}

const config = JSON.parse(process.argv[2] ?? '{}') as ChildConfig;
const logger = createLogger((process.env.DROVER_DNS_LOG_LEVEL as 'info' | undefined) ?? 'info', 'cluster-dns-node');
const client = new HttpClient({ server: config.server, caPem: config.caPem, token: config.token });
const dns = new ClusterDns({
  client: () => client,
  network: defaultServiceNetwork(),
  logger,
  ...(config.upstreams ? { upstreams: config.upstreams } : {}),
  ...(config.resolvConf ? { resolvConf: config.resolvConf } : {}),
  ...(config.upstreamTimeoutMs ? { upstreamTimeoutMs: config.upstreamTimeoutMs } : {}),
});

let stopping = false;
process.on('SIGTERM', () => {
  if (stopping) return;
  stopping = true;
  void dns.stop().then(
    () => {
      client.close();
      console.log(JSON.stringify({ stopped: true }));
      process.exit(0);
    },
    (error: unknown) => {
      console.error(String(error));
      process.exit(1);
    },
  );
});

let restarts = 0;
process.on('SIGUSR2', () => {
  void dns
    .stop()
    .then(() => dns.start())
    .then(
      () => console.log(JSON.stringify({ restarted: ++restarts })),
      (error: unknown) => console.error(`restart failed: ${String(error)}`),
    );
});

try {
  await dns.start();
  console.log(JSON.stringify({ ready: true, upstreams: dns.upstreams }));
} catch (error) {
  console.error(`cluster DNS did not start: ${String(error)}`);
  process.exit(1);
}
