import https from 'node:https';
import { STATS_SUMMARY_PATH, type StatsSummary } from '../agent/stats.js';
import { errors } from '../apiserver/errors.js';
import { METRICS_API_VERSION, METRICS_GROUP, type MetricsSource } from '../apiserver/kinds/metrics.js';
import { getPath, type KubeObject } from '../apiserver/objects.js';
import { type ApiClient, NODES, PODS } from '../client/types.js';
import type { AgentEndpoint } from '../cluster/node-registry.js';
import type { Logger } from '../logging/logger.js';
import { formatBytes } from '../node-protocol/quantity.js';
import { type AgentClientCredentials, agentTlsOptions } from './agent-tls.js';

/**
 * metrics.k8s.io from the agents, asked when a request comes (no cache of its own: each agent keeps
 * its last sample, so its CPU rates are over the window since the previous question, see
 * src/agent/stats.ts). The server reaches each node's agent as it does for `kubectl logs`: at the
 * address and port the node registered, with its client certificate from the client CA,
 * accepting only that node's serving certificate. A node that does not answer in time is left
 * out of a list and is a 404 for a get, as metrics-server treats a node it could not scrape.
 */

export interface ResourceMetricsOptions extends AgentClientCredentials {
  client: ApiClient;
  registry: { agentEndpoint(nodeName: string): AgentEndpoint | undefined };
  logger: Logger;
  /** Per agent; its first answer takes two samples a second apart. */
  timeoutMs?: number;
}

const NODE_METRICS = { group: METRICS_GROUP, plural: 'nodemetrics' };
const POD_METRICS = { group: METRICS_GROUP, plural: 'podmetrics' };
/** The most of an agent's answer read: a summary of 110 pods is a few tens of KiB. */
const MAX_SUMMARY_BYTES = 8 * 1024 * 1024;

function fetchSummary(options: ResourceMetricsOptions, nodeName: string): Promise<StatsSummary | undefined> {
  const endpoint = options.registry.agentEndpoint(nodeName);
  const ip = endpoint?.addresses[0];
  if (!endpoint || !ip) return Promise.resolve(undefined);
  return new Promise((resolve) => {
    const fail = (why: string): void => {
      options.logger.debug({ node: nodeName, address: `${ip}:${endpoint.port}`, reason: why }, 'no usage figures from this node');
      resolve(undefined);
    };
    const req = https.request(
      {
        host: ip,
        port: endpoint.port,
        path: STATS_SUMMARY_PATH,
        method: 'GET',
        ...agentTlsOptions(options, nodeName, ip),
        timeout: options.timeoutMs ?? 10_000,
      },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (chunk: Buffer) => {
          size += chunk.length;
          if (size > MAX_SUMMARY_BYTES) req.destroy(new Error('answer too large'));
          else chunks.push(chunk);
        });
        res.on('end', () => {
          if (res.statusCode !== 200) return fail(`HTTP ${res.statusCode}`);
          try {
            resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')) as StatsSummary);
          } catch (error) {
            fail(`not JSON: ${(error as Error).message}`);
          }
        });
        res.on('error', (error) => fail(error.message));
      },
    );
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', (error) => fail(error.message));
    req.end();
  });
}

const cpu = (nanoCores: number): string => `${Math.max(0, Math.round(nanoCores))}n`;
const memory = (bytes: number): string => formatBytes(Math.floor(bytes / 1024) * 1024);
const window = (summary: StatsSummary): string => `${summary.windowSeconds}s`;

function nodeMetrics(node: KubeObject, summary: StatsSummary): KubeObject | undefined {
  const { cpu: nodeCpu, memory: nodeMemory } = summary.node;
  if (!nodeCpu || !nodeMemory) return undefined;
  return {
    apiVersion: METRICS_API_VERSION,
    kind: 'NodeMetrics',
    metadata: { name: node.metadata.name!, creationTimestamp: new Date().toISOString().replace(/\.\d{3}Z$/, 'Z'), labels: node.metadata.labels ?? {} },
    timestamp: nodeCpu.time,
    window: window(summary),
    usage: { cpu: cpu(nodeCpu.usageNanoCores), memory: memory(nodeMemory.workingSetBytes) },
  };
}

function podMetrics(pod: KubeObject, summary: StatsSummary): KubeObject | undefined {
  const entry = summary.pods.find((p) => p.podRef.uid === pod.metadata.uid);
  if (!entry || entry.containers.length === 0) return undefined;
  return {
    apiVersion: METRICS_API_VERSION,
    kind: 'PodMetrics',
    metadata: {
      name: pod.metadata.name!,
      namespace: pod.metadata.namespace!,
      creationTimestamp: new Date().toISOString().replace(/\.\d{3}Z$/, 'Z'),
      labels: pod.metadata.labels ?? {},
    },
    timestamp: entry.containers[0]!.cpu.time,
    window: window(summary),
    containers: entry.containers.map((c) => ({ name: c.name, usage: { cpu: cpu(c.cpu.usageNanoCores), memory: memory(c.memory.workingSetBytes) } })),
  };
}

const nodeOf = (pod: KubeObject): string => {
  const name = getPath(pod, ['spec', 'nodeName']);
  return typeof name === 'string' ? name : '';
};

/** Pods with containers that may be running: bound, not finished. */
const mayRun = (pod: KubeObject): boolean => {
  const phase = getPath(pod, ['status', 'phase']);
  return nodeOf(pod) !== '' && phase !== 'Succeeded' && phase !== 'Failed';
};

export function resourceMetricsSource(options: ResourceMetricsOptions): MetricsSource {
  /** Each node asked once per question, in parallel. */
  const summaries = async (nodeNames: Iterable<string>): Promise<Map<string, StatsSummary>> => {
    const names = [...new Set(nodeNames)];
    const answers = await Promise.all(names.map((name) => fetchSummary(options, name)));
    const found = new Map<string, StatsSummary>();
    names.forEach((name, i) => answers[i] && found.set(name, answers[i]!));
    return found;
  };
  const metricsOfPods = async (pods: KubeObject[]): Promise<KubeObject[]> => {
    const running = pods.filter(mayRun);
    const byNode = await summaries(running.map(nodeOf));
    return running.flatMap((pod) => {
      const summary = byNode.get(nodeOf(pod));
      const metrics = summary ? podMetrics(pod, summary) : undefined;
      return metrics ? [metrics] : [];
    });
  };

  return {
    async node(name) {
      const node = await options.client.get(NODES, undefined, name);
      const summary = node ? (await summaries([name])).get(name) : undefined;
      const metrics = node && summary ? nodeMetrics(node, summary) : undefined;
      if (!metrics) throw errors.notFound(NODE_METRICS, name);
      return metrics;
    },
    async nodes() {
      const nodes = (await options.client.list(NODES, undefined)).items;
      const byNode = await summaries(nodes.map((n) => n.metadata.name!));
      return nodes.flatMap((node) => {
        const summary = byNode.get(node.metadata.name!);
        const metrics = summary ? nodeMetrics(node, summary) : undefined;
        return metrics ? [metrics] : [];
      });
    },
    async pod(namespace, name) {
      const pod = await options.client.get(PODS, namespace, name);
      const [metrics] = pod ? await metricsOfPods([pod]) : [];
      if (!metrics) throw errors.notFound(POD_METRICS, `${namespace}/${name}`);
      return metrics;
    },
    async pods(namespace) {
      return metricsOfPods((await options.client.list(PODS, namespace)).items);
    },
  };
}
