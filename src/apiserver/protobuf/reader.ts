/**
 * The protobuf wire format: one message split into its fields, and each field read as the scalar
 * or embedded message its schema says it is. Malformed input is a {@link ProtobufDecodeError}.
 */

import { ProtobufDecodeError } from './errors.js';

const WIRE_VARINT = 0;
const WIRE_FIXED64 = 1;
const WIRE_BYTES = 2;
const WIRE_FIXED32 = 5;

export interface Field {
  field: number;
  wire: number;
  /** Varints as bigint (unsigned 64-bit); length-delimited and fixed-width values as bytes. */
  value: bigint | Uint8Array;
}

/** Split one message into its fields, in wire order. */
export function parseMessage(buf: Uint8Array, message: string): Field[] {
  const fields: Field[] = [];
  let pos = 0;

  const varint = (what: string): bigint => {
    let result = 0n;
    for (let i = 0; i < 10; i++) {
      if (pos >= buf.length) throw new ProtobufDecodeError(`truncated varint (${what}) in ${message}`);
      const byte = buf[pos++]!;
      result |= BigInt(byte & 0x7f) << BigInt(7 * i);
      if ((byte & 0x80) === 0) return BigInt.asUintN(64, result);
    }
    throw new ProtobufDecodeError(`varint longer than 10 bytes (${what}) in ${message}`);
  };
  const take = (length: number, what: string): Uint8Array => {
    if (length > buf.length - pos) {
      throw new ProtobufDecodeError(
        `truncated ${what} in ${message}: ${length} bytes declared, ${buf.length - pos} left`,
      );
    }
    const bytes = buf.subarray(pos, pos + length);
    pos += length;
    return bytes;
  };

  while (pos < buf.length) {
    const tag = varint('field tag');
    const field = Number(tag >> 3n);
    const wire = Number(tag & 7n);
    if (field === 0 || tag >> 3n > 0x1fffffffn) {
      throw new ProtobufDecodeError(`invalid field number ${tag >> 3n} in ${message}`);
    }
    switch (wire) {
      case WIRE_VARINT:
        fields.push({ field, wire, value: varint(`field ${field}`) });
        break;
      case WIRE_FIXED64:
        fields.push({ field, wire, value: take(8, `fixed64 field ${field}`) });
        break;
      case WIRE_BYTES: {
        const length = varint(`length of field ${field}`);
        if (length > BigInt(buf.length - pos)) {
          throw new ProtobufDecodeError(
            `truncated field ${field} in ${message}: ${length} bytes declared, ${buf.length - pos} left`,
          );
        }
        fields.push({ field, wire, value: take(Number(length), `field ${field}`) });
        break;
      }
      case WIRE_FIXED32:
        fields.push({ field, wire, value: take(4, `fixed32 field ${field}`) });
        break;
      default:
        throw new ProtobufDecodeError(`unsupported wire type ${wire} for field ${field} in ${message}`);
    }
  }
  return fields;
}

function expectWire(f: Field, wire: number, message: string): void {
  if (f.wire !== wire) {
    throw new ProtobufDecodeError(`field ${f.field} of ${message} has wire type ${f.wire}, expected ${wire}`);
  }
}

const utf8 = new TextDecoder('utf-8');

export function str(f: Field, message: string): string {
  expectWire(f, WIRE_BYTES, message);
  return utf8.decode(f.value as Uint8Array);
}

export function bytes(f: Field, message: string): Uint8Array {
  expectWire(f, WIRE_BYTES, message);
  return f.value as Uint8Array;
}

function toSafeNumber(value: bigint, f: Field, message: string): number {
  if (value > BigInt(Number.MAX_SAFE_INTEGER) || value < BigInt(Number.MIN_SAFE_INTEGER)) {
    throw new ProtobufDecodeError(`field ${f.field} of ${message} is out of range: ${value}`);
  }
  return Number(value);
}

export function int64(f: Field, message: string): number {
  expectWire(f, WIRE_VARINT, message);
  return toSafeNumber(BigInt.asIntN(64, f.value as bigint), f, message);
}

export function int32(f: Field, message: string): number {
  expectWire(f, WIRE_VARINT, message);
  return Number(BigInt.asIntN(32, f.value as bigint));
}

export function bool(f: Field, message: string): boolean {
  expectWire(f, WIRE_VARINT, message);
  return (f.value as bigint) !== 0n;
}

/**
 * The fields of a singular embedded message, or undefined when absent. A message field that
 * occurs more than once is merged, as protobuf specifies, by decoding the concatenation.
 */
export function embedded(fields: Field[], number: number, message: string): Uint8Array | undefined {
  const parts = fields.filter((f) => f.field === number).map((f) => bytes(f, message));
  if (parts.length === 0) return undefined;
  return parts.length === 1 ? parts[0]! : Buffer.concat(parts);
}
