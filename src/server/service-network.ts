import type { ServerSettings } from '../config/schema.js';
import { parseServiceNetwork, type ServiceNetwork } from '../node-protocol/service-network.js';
import { ServerConfigError } from './errors.js';

/** The cluster's Service network from this server's settings (the resolver has refused bad values already; this guards other callers). */
export function serviceNetworkFromSettings(settings: ServerSettings): ServiceNetwork {
  const { network, problems } = parseServiceNetwork({
    clusterCidr: settings.clusterCidr,
    serviceCidr: settings.serviceCidr,
    serviceNodePortRange: settings.serviceNodePortRange,
    clusterDns: settings.clusterDns,
    clusterDomain: settings.clusterDomain,
  });
  if (!network) throw new ServerConfigError(problems.join('; '));
  return network;
}
