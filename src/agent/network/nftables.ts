import { execFile, spawn } from 'node:child_process';

/**
 * The `nft` command (Debian's nftables), as the Service datapath uses it: apply a script as one
 * transaction (`nft -f -`: all of it or none), read a table as JSON (`nft -j`, schema 1), delete
 * a table. `command` is the binary, or a command prefix (tests run `ip netns exec <ns> nft` so
 * their rules live in a network namespace of their own).
 */

export class NftError extends Error {
  override name = 'NftError';
  constructor(
    message: string,
    readonly stderr: string,
    readonly code: number | null,
  ) {
    super(message);
  }
}

/** One table's contents, as `nft -j list table` gives them. */
export interface NftTable {
  chains: string[];
  /** Sets and maps. */
  sets: string[];
  /** Rules per chain, in order, as nft's JSON expressions. */
  rules: { chain: string; expr: unknown[] }[];
  /** Map and set elements by name, as nft's JSON gives them. */
  elements: Map<string, unknown[]>;
  /** The table each chain and set (same index) belongs to (a family-wide listing holds several). */
  owners: { chains: string[]; sets: string[] };
}

type JsonObject = Record<string, unknown>;

export class Nft {
  private readonly argv: string[];

  constructor(command: string | readonly string[] = 'nft') {
    this.argv = typeof command === 'string' ? [command] : [...command];
    if (this.argv.length === 0) throw new NftError('the nft command is empty', '', null);
  }

  /** Runs nft with `args`, `input` on stdin; its stdout, or an NftError with its stderr. */
  run(args: readonly string[], input?: string): Promise<string> {
    const [file, ...prefix] = this.argv;
    return new Promise((resolve, reject) => {
      const child = spawn(file!, [...prefix, ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
      const out: Buffer[] = [];
      const err: Buffer[] = [];
      child.stdout.on('data', (chunk: Buffer) => out.push(chunk));
      child.stderr.on('data', (chunk: Buffer) => err.push(chunk));
      child.on('error', (error) => reject(new NftError(`cannot run ${file}: ${error.message}`, '', null)));
      child.on('close', (code) => {
        const stderr = Buffer.concat(err).toString('utf8');
        if (code === 0) resolve(Buffer.concat(out).toString('utf8'));
        else reject(new NftError(`nft ${args.join(' ')} failed (exit ${code}): ${stderr.trim().split('\n').slice(0, 6).join(' | ')}`, stderr, code));
      });
      // An early exit closes stdin under us; the exit code tells what happened.
      child.stdin.on('error', () => undefined);
      child.stdin.end(input ?? '');
    });
  }

  /** Applies `script` as one transaction: every command takes effect, or none does. */
  async apply(script: string): Promise<void> {
    await this.run(['-f', '-'], script);
  }

  /** The table's chains, sets, maps and rules; undefined when there is no such table. */
  async readTable(family: string, name: string): Promise<NftTable | undefined> {
    let text: string;
    try {
      text = await this.run(['-j', 'list', 'table', family, name]);
    } catch (error) {
      if (error instanceof NftError && /No such file or directory/.test(error.stderr)) return undefined;
      throw error;
    }
    return parseTable(text);
  }

  /**
   * The names of the table's chains and sets (maps included), without its rules: `list chains`
   * and `list sets` of the family are a tenth of the cost of listing a large table whole.
   */
  async readNames(family: string, name: string): Promise<{ chains: string[]; sets: string[] }> {
    const [chains, sets, maps] = await Promise.all(
      ['chains', 'sets', 'maps'].map(async (what) => parseTable(await this.run(['-j', 'list', what, family]))),
    );
    const mine = (table: NftTable, key: 'chains' | 'sets'): string[] => table[key].filter((_, i) => table.owners[key][i] === name);
    return { chains: mine(chains!, 'chains'), sets: [...mine(sets!, 'sets'), ...mine(maps!, 'sets')] };
  }

  /** Deletes the table; nothing happens when it does not exist. */
  async deleteTable(family: string, name: string): Promise<void> {
    // `destroy` (ignore a missing table) is nft >= 1.0.8; add-then-delete works on 1.0.6.
    await this.apply(`add table ${family} ${name}\ndelete table ${family} ${name}\n`);
  }
}

/** `nft -j` output (json_schema_version 1) to an NftTable. */
export function parseTable(text: string): NftTable {
  const parsed = JSON.parse(text) as { nftables?: JsonObject[] };
  const table: NftTable = { chains: [], sets: [], rules: [], elements: new Map(), owners: { chains: [], sets: [] } };
  for (const entry of parsed.nftables ?? []) {
    if (entry.chain) {
      table.chains.push(String((entry.chain as JsonObject).name));
      table.owners.chains.push(String((entry.chain as JsonObject).table));
    }
    const set = (entry.set ?? entry.map) as JsonObject | undefined;
    if (set) {
      const name = String(set.name);
      table.sets.push(name);
      table.owners.sets.push(String(set.table));
      table.elements.set(name, (set.elem as unknown[] | undefined) ?? []);
    }
    if (entry.rule) {
      const rule = entry.rule as JsonObject;
      table.rules.push({ chain: String(rule.chain), expr: (rule.expr as unknown[] | undefined) ?? [] });
    }
  }
  return table;
}

/** Runs `nft --version` once: whether the binary is there (for a clear message at start). */
export function nftVersion(command: string | readonly string[] = 'nft'): Promise<string | undefined> {
  const [file, ...prefix] = typeof command === 'string' ? [command] : command;
  return new Promise((resolve) => {
    execFile(file!, [...prefix, '--version'], (error, stdout) => resolve(error ? undefined : stdout.trim()));
  });
}
