import assert from 'node:assert/strict';
import type { KubectlResult } from './kubectl.js';

/** kubectl's column output, one row per object, cells keyed by header. */
export interface Table {
  headers: string[];
  rows: Record<string, string>[];
}

/**
 * Parse kubectl's column output. kubectl aligns every cell under its header (tabwriter), so each
 * column is the slice from its header's start to the next header's start. Headers are separated
 * by two or more spaces (some, like `LAST SEEN`, contain one).
 */
export function parseTable(stdout: string): Table {
  const lines = stdout.split('\n').filter((l) => l.trim() !== '');
  assert.ok(lines.length > 0, `expected a table, got ${JSON.stringify(stdout)}`);
  const starts: number[] = [];
  const headers: string[] = [];
  for (const match of lines[0]!.matchAll(/\S+(?: \S+)*/g)) {
    starts.push(match.index);
    headers.push(match[0]);
  }
  const rows = lines.slice(1).map((line) => {
    const row: Record<string, string> = {};
    headers.forEach((h, i) => {
      row[h] = line.slice(starts[i], i + 1 < starts.length ? starts[i + 1] : undefined).trim();
    });
    return row;
  });
  return { headers, rows };
}

/** kubectl prints one table per kind, separated by a blank line. */
export function parseTables(stdout: string): Table[] {
  return stdout
    .split(/\n\s*\n/)
    .filter((block) => block.trim() !== '')
    .map(parseTable);
}

export function rowNamed(table: Table | undefined, name: string): Record<string, string> {
  assert.ok(table, `no table to find ${name} in`);
  const row = table.rows.find((r) => r.NAME === name);
  assert.ok(row, `no row named ${name} in ${JSON.stringify(table.rows)}`);
  return row;
}

export function assertOk(result: KubectlResult, what: string): void {
  assert.equal(result.code, 0, `${what} exited ${result.code}\nstdout: ${result.stdout}\nstderr: ${result.stderr}`);
}
