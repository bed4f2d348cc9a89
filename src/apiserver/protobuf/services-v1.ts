/**
 * core/v1 Service as kubectl 1.32's `create service clusterip|nodeport|loadbalancer|externalname`
 * sends it (protobuf), field numbers as k8s.io/api/core/v1/generated.proto. Service {1 metadata,
 * 2 spec, 3 status (the server's: ignored)}. The answers stay JSON, which kubectl reads.
 */

import { inOrder, type Json, nonEmpty } from './go-json.js';
import { decodeIntOrString, decodeStrictObject, decodeStringMap } from './meta.js';
import { bool, bytes, embedded, type Field, int32, parseMessage, str } from './reader.js';

/** ServicePort {1 name, 2 protocol, 3 port, 4 targetPort IntOrString, 5 nodePort, 6 appProtocol *string}. */
function decodeServicePort(buf: Uint8Array): Json {
  const m = 'ServicePort';
  const out: Json = {};
  let port = 0;
  for (const f of parseMessage(buf, m)) {
    if (f.field === 1) out.name = nonEmpty(str(f, m));
    else if (f.field === 2) out.protocol = nonEmpty(str(f, m));
    else if (f.field === 3) port = int32(f, m);
    else if (f.field === 4) out.targetPort = decodeIntOrString(bytes(f, m), 'Service');
    else if (f.field === 5) out.nodePort = int32(f, m) || undefined;
    else if (f.field === 6) out.appProtocol = str(f, m);
  }
  // port has no omitempty in Go; targetPort is a struct, always written (0 when unset).
  return inOrder({ ...out, port, targetPort: out.targetPort ?? 0 }, ['name', 'protocol', 'appProtocol', 'port', 'targetPort', 'nodePort']);
}

/** SessionAffinityConfig {1 clientIP {1 timeoutSeconds *int32}}. */
function decodeAffinityConfig(buf: Uint8Array): Json {
  const clientIP = embedded(parseMessage(buf, 'SessionAffinityConfig'), 1, 'SessionAffinityConfig');
  if (!clientIP) return {};
  const config: Json = {};
  for (const f of parseMessage(clientIP, 'ClientIPConfig')) if (f.field === 1) config.timeoutSeconds = int32(f, 'ClientIPConfig');
  return { clientIP: config };
}

const SPEC_ORDER = [
  'ports', 'selector', 'clusterIP', 'clusterIPs', 'type', 'externalIPs', 'sessionAffinity', 'loadBalancerIP', 'loadBalancerSourceRanges',
  'externalName', 'externalTrafficPolicy', 'healthCheckNodePort', 'publishNotReadyAddresses', 'sessionAffinityConfig', 'ipFamilies',
  'ipFamilyPolicy', 'allocateLoadBalancerNodePorts', 'loadBalancerClass', 'internalTrafficPolicy',
];

/**
 * ServiceSpec {1 ports, 2 selector map, 3 clusterIP, 4 type, 5 externalIPs, 7 sessionAffinity,
 * 8 loadBalancerIP, 9 loadBalancerSourceRanges, 10 externalName, 11 externalTrafficPolicy,
 * 12 healthCheckNodePort, 13 publishNotReadyAddresses, 14 sessionAffinityConfig, 17 ipFamilyPolicy,
 * 18 clusterIPs, 19 ipFamilies, 20 allocateLoadBalancerNodePorts, 21 loadBalancerClass,
 * 22 internalTrafficPolicy}.
 */
function decodeServiceSpec(buf: Uint8Array): Json {
  const m = 'ServiceSpec';
  const fields = parseMessage(buf, m);
  const spec: Json = {};
  const ports: Json[] = [];
  const selector: Field[] = [];
  const lists: Record<string, string[]> = { externalIPs: [], loadBalancerSourceRanges: [], clusterIPs: [], ipFamilies: [] };
  for (const f of fields) {
    switch (f.field) {
      case 1: ports.push(decodeServicePort(bytes(f, m))); break;
      case 2: selector.push(f); break;
      case 3: spec.clusterIP = nonEmpty(str(f, m)); break;
      case 4: spec.type = nonEmpty(str(f, m)); break;
      case 5: lists.externalIPs!.push(str(f, m)); break;
      case 7: spec.sessionAffinity = nonEmpty(str(f, m)); break;
      case 8: spec.loadBalancerIP = nonEmpty(str(f, m)); break;
      case 9: lists.loadBalancerSourceRanges!.push(str(f, m)); break;
      case 10: spec.externalName = nonEmpty(str(f, m)); break;
      case 11: spec.externalTrafficPolicy = nonEmpty(str(f, m)); break;
      case 12: spec.healthCheckNodePort = int32(f, m) || undefined; break;
      case 13: spec.publishNotReadyAddresses = bool(f, m) || undefined; break;
      case 14: spec.sessionAffinityConfig = decodeAffinityConfig(bytes(f, m)); break;
      case 17: spec.ipFamilyPolicy = str(f, m); break;
      case 18: lists.clusterIPs!.push(str(f, m)); break;
      case 19: lists.ipFamilies!.push(str(f, m)); break;
      case 20: spec.allocateLoadBalancerNodePorts = bool(f, m); break;
      case 21: spec.loadBalancerClass = str(f, m); break;
      case 22: spec.internalTrafficPolicy = str(f, m); break;
      default: break;
    }
  }
  if (ports.length) spec.ports = ports;
  if (selector.length) {
    const map = decodeStringMap(selector, 'ServiceSpec.selector');
    if (Object.keys(map).length) spec.selector = map;
  }
  for (const [key, values] of Object.entries(lists)) if (values.length) spec[key] = values;
  return inOrder(spec, SPEC_ORDER);
}

export function decodeService(raw: Uint8Array): Record<string, unknown> {
  const kind = 'Service';
  const { fields, metadata } = decodeStrictObject(raw, kind);
  const spec = embedded(fields, 2, kind);
  return { apiVersion: 'v1', kind, metadata, spec: spec ? decodeServiceSpec(spec) : {} };
}
