import fs from 'node:fs';
import path from 'node:path';
import { HttpClient } from '../client/http.js';
import type { ApiServersAnswer, ClusterTimings } from '../cluster/drover-endpoints.js';
import { deriveTimings } from '../config/timings.js';
import type { Logger } from '../logging/logger.js';
import { writeFileAtomic } from '../security/files.js';

/**
 * The servers an agent knows and the one it talks to. It starts from the `--server` it was given,
 * learns the others from `/drover/v1/apiservers` and remembers them in `servers.json`, so that the
 * first server is needed once: after that, any live server will do (registration and renewals
 * move between them).
 */

/** What a registration gives the agent for any server: the CA, the credential, the timings. */
export interface ServerCredentials {
  caPem: string;
  token: string;
  timings: ClusterTimings;
}

export class ServerConnection {
  private current: string | undefined;
  private credentials: ServerCredentials | undefined;
  private httpClient: HttpClient | undefined;

  constructor(
    /** The `--server` the agent was given. */
    private readonly firstServer: string,
    private readonly agentDir: string,
    private readonly logger: Logger,
  ) {}

  /** The client of the server in use; none before the first registration. */
  get client(): HttpClient | undefined {
    return this.httpClient;
  }

  /** The URL of the server in use. */
  get server(): string | undefined {
    return this.current;
  }

  /** Servers to try, current first: the one we were given, then those learned from the cluster. */
  candidates(): string[] {
    let learned: string[] = [];
    try {
      learned = JSON.parse(fs.readFileSync(this.serversFile(), 'utf8')) as string[];
    } catch {
      // none learned yet
    }
    const ordered = [this.current ?? this.firstServer, this.firstServer, ...learned];
    return [...new Set(ordered)];
  }

  /**
   * Talk to `server` from now on, with the credentials of the latest registration (or these,
   * from a registration that just succeeded).
   */
  connect(server: string, credentials: ServerCredentials | undefined = this.credentials): void {
    if (!credentials) throw new Error('cannot connect to a server before this node is registered');
    this.credentials = credentials;
    this.httpClient?.close();
    this.current = server;
    this.httpClient = new HttpClient({
      server,
      caPem: credentials.caPem,
      token: credentials.token,
      // A hung server must be given up on well before the node looks late (half the grace).
      timeoutMs: deriveTimings(credentials.timings).agentRequestTimeoutMs,
    });
  }

  /** Learn where else the API is served, and remember it so the first --server is needed once. */
  async refresh(): Promise<void> {
    try {
      const answer = (await this.httpClient!.request('GET', '/drover/v1/apiservers')) as ApiServersAnswer;
      const urls = [...new Set(answer.servers.map((s) => s.url))];
      if (urls.length) writeFileAtomic(this.serversFile(), JSON.stringify(urls), 0o644);
    } catch (error) {
      this.logger.debug({ err: error }, 'could not refresh the server list');
    }
  }

  close(): void {
    this.httpClient?.close();
  }

  private serversFile(): string {
    return path.join(this.agentDir, 'servers.json');
  }
}
