/**
 * The OpenAPI v2 document as gnostic's `openapi.v2.Document` protobuf
 * (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`), which kubectl 1.20 asks for
 * before it validates or applies: without it, kubectl 1.20 needs --validate=false. Only what
 * kubectl reads is encoded: swagger, info and the definitions (kube-openapi builds its models
 * from those; vendor extensions such as x-kubernetes-group-version-kind travel as YAML, of which
 * JSON is a subset). Field numbers are gnostic's OpenAPIv2.proto. Paths are left out.
 */

type Schema = Record<string, unknown>;

/** Protobuf wire format, written bottom-up: each message is its fields' bytes. */
class Message {
  private readonly parts: Buffer[] = [];

  private varint(value: number): void {
    const bytes: number[] = [];
    let v = BigInt(Math.trunc(value));
    if (v < 0n) v += 1n << 64n;
    do {
      let byte = Number(v & 0x7fn);
      v >>= 7n;
      if (v > 0n) byte |= 0x80;
      bytes.push(byte);
    } while (v > 0n);
    this.parts.push(Buffer.from(bytes));
  }

  private tag(field: number, wire: number): void {
    this.varint((field << 3) | wire);
  }

  bytes(field: number, value: Buffer): this {
    this.tag(field, 2);
    this.varint(value.length);
    this.parts.push(value);
    return this;
  }

  string(field: number, value: unknown): this {
    if (typeof value === 'string' && value !== '') this.bytes(field, Buffer.from(value, 'utf8'));
    return this;
  }

  message(field: number, value: Message | undefined): this {
    if (value) this.bytes(field, value.encode());
    return this;
  }

  bool(field: number, value: unknown): this {
    if (value === true) {
      this.tag(field, 0);
      this.varint(1);
    }
    return this;
  }

  int64(field: number, value: unknown): this {
    if (typeof value === 'number' && Number.isFinite(value)) {
      this.tag(field, 0);
      this.varint(value);
    }
    return this;
  }

  double(field: number, value: unknown): this {
    if (typeof value === 'number' && Number.isFinite(value)) {
      this.tag(field, 1);
      const buffer = Buffer.alloc(8);
      buffer.writeDoubleLE(value);
      this.parts.push(buffer);
    }
    return this;
  }

  encode(): Buffer {
    return Buffer.concat(this.parts);
  }
}

/** gnostic's Any: the value as YAML (field 2). */
const anyYaml = (value: unknown): Message => new Message().string(2, JSON.stringify(value) ?? 'null');

const named = (name: string, value: Message): Message => new Message().string(1, name).message(2, value);

function schemaMessage(schema: Schema): Message {
  const m = new Message()
    .string(1, schema.$ref)
    .string(2, schema.format)
    .string(3, schema.title)
    .string(4, schema.description);
  if (schema.default !== undefined) m.message(5, anyYaml(schema.default));
  m.double(6, schema.multipleOf).double(7, schema.maximum).bool(8, schema.exclusiveMaximum).double(9, schema.minimum).bool(10, schema.exclusiveMinimum);
  m.int64(11, schema.maxLength).int64(12, schema.minLength).string(13, schema.pattern).int64(14, schema.maxItems).int64(15, schema.minItems);
  m.bool(16, schema.uniqueItems).int64(17, schema.maxProperties).int64(18, schema.minProperties);
  if (Array.isArray(schema.required)) for (const name of schema.required) m.string(19, name);
  if (Array.isArray(schema.enum)) for (const value of schema.enum) m.message(20, anyYaml(value));
  const additional = schema.additionalProperties;
  if (typeof additional === 'boolean') m.message(21, new Message().bool(2, additional));
  else if (additional && typeof additional === 'object') m.message(21, new Message().message(1, schemaMessage(additional as Schema)));
  if (typeof schema.type === 'string') m.message(22, new Message().string(1, schema.type));
  if (schema.items && typeof schema.items === 'object') m.message(23, new Message().message(1, schemaMessage(schema.items as Schema)));
  if (Array.isArray(schema.allOf)) for (const part of schema.allOf) m.message(24, schemaMessage(part as Schema));
  if (schema.properties && typeof schema.properties === 'object') {
    const properties = new Message();
    for (const [name, child] of Object.entries(schema.properties as Record<string, Schema>)) properties.message(1, named(name, schemaMessage(child)));
    m.message(25, properties);
  }
  m.bool(27, schema.readOnly);
  for (const [key, value] of Object.entries(schema)) {
    if (key.startsWith('x-')) m.message(31, named(key, anyYaml(value)));
  }
  return m;
}

/** An OpenAPI v2 (swagger 2.0) document, as kube-openapi serves it in protobuf. */
export function encodeOpenApiV2(document: { swagger: string; info: { title: string; version: string }; definitions: Record<string, Schema> }): Buffer {
  const definitions = new Message();
  for (const [name, schema] of Object.entries(document.definitions)) definitions.message(1, named(name, schemaMessage(schema)));
  return new Message()
    .string(1, document.swagger)
    .message(2, new Message().string(1, document.info.title).string(2, document.info.version))
    .message(9, definitions)
    .encode();
}
