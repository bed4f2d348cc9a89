/**
 * Helpers that give a decoded message the JSON shape Go's encoding/json would give the struct.
 *
 * Go marshals non-pointer fields even when zero and pointer fields only when set, so the decoders
 * emit each field the way Go's JSON encoding of the decoded struct would: `omitempty` scalars
 * when non-zero, pointers whenever present (an explicit `replicas: 0` survives), and struct-typed
 * fields (`resources`, `strategy`, `template`) always. Field numbers the proto does not define
 * (newer than this decoder) are skipped, as protobuf specifies. Fields the proto defines that
 * Drover does not decode (volumes, probes, affinity, …) are refused with 415 when present rather
 * than silently dropped, since the stored object would then differ from what the client sent.
 */

import { jsonHint, ProtobufUnsupportedError } from './errors.js';
import type { Field } from './reader.js';

export type Json = Record<string, unknown>;

/** Where in the object a message sits, for messages a user can act on. */
export interface Ctx {
  kind: string;
  path: string;
}

export function at(ctx: Ctx, field: string): Ctx {
  return { kind: ctx.kind, path: ctx.path ? `${ctx.path}.${field}` : field };
}

function undecodedField(ctx: Ctx, jsonName: string): ProtobufUnsupportedError {
  const path = ctx.path ? `${ctx.path}.${jsonName}` : jsonName;
  return new ProtobufUnsupportedError(
    `Drover does not decode ${path} in a protobuf ${ctx.kind}; ${jsonHint(ctx.kind)}`,
  );
}

/** Throw for a field the proto defines but this decoder does not; ignore numbers it does not know. */
export function refuseUndecoded(f: Field, undecoded: Readonly<Record<number, string>>, ctx: Ctx): void {
  const jsonName = undecoded[f.field];
  if (jsonName !== undefined) throw undecodedField(ctx, jsonName);
}

/** Copy the defined entries of `values` in `order`, which is the Go struct's (and so JSON's) order. */
export function inOrder(values: Json, order: readonly string[]): Json {
  const out: Json = {};
  for (const key of order) if (values[key] !== undefined) out[key] = values[key];
  return out;
}

export const nonEmpty = (s: string): string | undefined => (s ? s : undefined);
export const nonZero = (n: number): number | undefined => (n ? n : undefined);
export const orUndefined = (b: boolean): true | undefined => (b ? true : undefined);
export const listOrUndefined = <T>(list: T[]): T[] | undefined => (list.length ? list : undefined);
