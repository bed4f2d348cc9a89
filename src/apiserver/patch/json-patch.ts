/** RFC 6902 JSON patch (`application/json-patch+json`), applied with fast-json-patch. */
import jsonpatch, { type Operation } from 'fast-json-patch';
import { cloneJson, isJsonObject, type JsonValue } from '../json.js';
import { PatchError } from './merge.js';

// fast-json-patch also understands an internal `_get` op; a client must not be able to send it.
const OPERATIONS = new Set(['add', 'remove', 'replace', 'move', 'copy', 'test']);

/**
 * Applies the operations in `patch` to `original`, all or nothing. Following the Kubernetes API
 * server, a body that is not a list of operation objects is a 400, and every failure while
 * applying (unknown op, missing path, failed `test`, ...) is a 422. Neither argument is modified,
 * and the result shares no structure with them.
 */
export function applyJsonPatch(original: JsonValue, patch: JsonValue, consumeOriginal = false): JsonValue {
  const operations = decodeOperations(patch);
  let document = consumeOriginal ? original : cloneJson(original);
  // One operation at a time, because the library reports index 0 for some failures in a sequence.
  operations.forEach((operation, index) => {
    try {
      document = jsonpatch.applyOperation(document, operation, true, true, true, index).newDocument;
    } catch (err) {
      if (err instanceof jsonpatch.JsonPatchError) {
        throw new PatchError(describeFailure(err, operation, index), 422);
      }
      throw err;
    }
  });
  return document;
}

function decodeOperations(patch: JsonValue): Operation[] {
  if (!Array.isArray(patch)) {
    throw new PatchError('a JSON patch must be a JSON array of operations', 400);
  }
  // The library keeps references to operation values inside the result and sets fields on the
  // operations themselves, so it works on a copy.
  const operations = cloneJson(patch);
  operations.forEach((operation, index) => {
    if (!isJsonObject(operation)) {
      throw new PatchError(`JSON patch operation ${index} is not a JSON object`, 400);
    }
    const { op, path, from } = operation;
    if (typeof op !== 'string' || !OPERATIONS.has(op)) {
      throw new PatchError(`JSON patch operation ${index}: unknown op ${JSON.stringify(op ?? null)}`, 422);
    }
    for (const pointer of [path, from]) {
      if (typeof pointer === 'string' && touchesPrototype(pointer)) {
        throw new PatchError(`JSON patch operation ${index}: path ${pointer} is not allowed`, 422);
      }
    }
    // RFC 6902 forbids moving a value into one of its own children; the library would lose it.
    if (op === 'move' && typeof path === 'string' && typeof from === 'string' && path.startsWith(`${from}/`)) {
      throw new PatchError(`JSON patch operation ${index}: cannot move ${from} into its own child ${path}`, 422);
    }
  });
  return operations as unknown as Operation[];
}

/**
 * fast-json-patch throws a TypeError (not its own error type) for these; rejecting them first
 * keeps every client mistake a {@link PatchError}.
 */
function touchesPrototype(pointer: string): boolean {
  const tokens = pointer.split('/').map((token) => token.replaceAll('~1', '/').replaceAll('~0', '~'));
  return tokens.some((token, i) => token === '__proto__' || (token === 'prototype' && tokens[i - 1] === 'constructor'));
}

// The library's messages append the operation and the whole document, which is not for clients.
const FAILURES: Readonly<Record<string, string>> = {
  OPERATION_OP_INVALID: 'unknown op',
  OPERATION_PATH_INVALID: 'path must be a JSON pointer: empty or starting with "/"',
  OPERATION_FROM_REQUIRED: 'missing "from"',
  OPERATION_VALUE_REQUIRED: 'missing "value"',
  OPERATION_PATH_CANNOT_ADD: 'the parent of the path does not exist',
  OPERATION_PATH_UNRESOLVABLE: 'the path does not exist',
  OPERATION_FROM_UNRESOLVABLE: 'the "from" path does not exist',
  OPERATION_PATH_ILLEGAL_ARRAY_INDEX: 'the path indexes an array with something other than a number',
  OPERATION_VALUE_OUT_OF_BOUNDS: 'the array index is out of bounds',
  TEST_OPERATION_FAILED: 'test failed: the value differs',
};

function describeFailure(err: InstanceType<typeof jsonpatch.JsonPatchError>, operation: Operation, index: number): string {
  const reason = Object.hasOwn(FAILURES, err.name) ? FAILURES[err.name] : err.message.split('\n', 1)[0];
  return `JSON patch operation ${index} (${operation.op} ${String(operation.path)}): ${reason}`;
}
