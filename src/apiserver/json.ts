/** JSON values as they arrive on the wire and as objects are stored. */
export type JsonPrimitive = string | number | boolean | null;
export type JsonValue = JsonPrimitive | JsonValue[] | JsonObject;
export interface JsonObject {
  [key: string]: JsonValue;
}

export function isJsonObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Deep copy through JSON; objects here are always plain JSON. */
export function cloneJson<T extends JsonValue>(value: T): T {
  return structuredClone(value);
}
