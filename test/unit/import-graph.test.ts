import assert from 'node:assert/strict';
import path from 'node:path';
import { before, describe, it } from 'node:test';
import madge, { type MadgeResult } from 'madge';
import { REPO_ROOT } from '../helpers/server.js';

/**
 * The shape of src/ as docs/architecture.md draws it: no import cycles, and dependencies that
 * point one way down the layers (cli → server → agent → cluster → controllers → client →
 * apiserver → datastore). Beside the layers are helpers that any layer may use and that import
 * only the layers or helpers named for them below. madge reads the imports, type-only ones
 * included (a type cycle is still a cycle for a reader).
 */

/** Higher may import lower, never the other way. */
const LAYERS = ['datastore', 'apiserver', 'client', 'controllers', 'cluster', 'agent', 'server', 'cli'];

/** What each helper may import (besides its own folder). Everything else is a layer. */
const HELPERS: Record<string, string[]> = {
  'version.ts': [],
  logging: [],
  security: ['logging'],
  'node-protocol': [],
  metrics: ['datastore', 'logging'],
  config: ['datastore', 'logging', 'node-protocol', 'security'],
  // The image store and its formats: node and npm modules only; agents and the CLI use it.
  images: ['logging', 'security'],
};

function unitOf(file: string): string {
  const slash = file.indexOf('/');
  return slash < 0 ? file : file.slice(0, slash);
}

/** Why `from` may not import `to`, or undefined when it may. */
function violation(from: string, to: string): string | undefined {
  if (from === to) return undefined;
  if (to in HELPERS) {
    const allowed = HELPERS[from];
    if (allowed && !allowed.includes(to)) return `helper ${from} may import only ${allowed.join(', ') || 'nothing'}`;
    return undefined;
  }
  const toRank = LAYERS.indexOf(to);
  if (toRank < 0) return `${to} is neither a layer nor a helper (add it to this test and docs/architecture.md)`;
  if (from in HELPERS) {
    return HELPERS[from]!.includes(to) ? undefined : `helper ${from} may import only ${HELPERS[from]!.join(', ') || 'nothing'}`;
  }
  const fromRank = LAYERS.indexOf(from);
  if (fromRank < 0) return `${from} is neither a layer nor a helper (add it to this test and docs/architecture.md)`;
  return fromRank > toRank ? undefined : `${from} is below ${to}: dependencies point down only`;
}

describe('the import graph of src/', () => {
  let graph: MadgeResult;
  before(async () => {
    graph = await madge(path.join(REPO_ROOT, 'src'), {
      fileExtensions: ['ts'],
      tsConfig: path.join(REPO_ROOT, 'tsconfig.json'),
    });
  });

  it('reads every file (nothing skipped as unresolvable)', () => {
    assert.deepEqual(graph.warnings().skipped, []);
    assert.ok(Object.keys(graph.obj()).length > 50, 'madge found the source files');
  });

  it('has no import cycle', () => {
    assert.deepEqual(graph.circular().map((cycle) => cycle.join(' > ')), []);
  });

  it('has dependencies that point down the layers, helpers beside them', () => {
    const wrong: string[] = [];
    for (const [file, imports] of Object.entries(graph.obj())) {
      for (const imported of imports) {
        const why = violation(unitOf(file), unitOf(imported));
        if (why) wrong.push(`${file} imports ${imported}: ${why}`);
      }
    }
    assert.deepEqual(wrong, []);
  });

  it('the rule itself: catches an upward import and a helper importing a layer', () => {
    assert.match(violation('apiserver', 'controllers') ?? '', /point down only/);
    assert.match(violation('logging', 'apiserver') ?? '', /may import only nothing/);
    assert.equal(violation('controllers', 'client'), undefined);
    assert.equal(violation('agent', 'node-protocol'), undefined);
    assert.match(violation('images', 'agent') ?? '', /may import only logging, security/);
    assert.equal(violation('agent', 'images'), undefined);
  });
});
