/**
 * The syntax error Go's encoding/json reports for a text, worded as Go words it ("invalid
 * character 'x' looking for beginning of value", "unexpected end of JSON input"), for the
 * messages kube-apiserver gives about a docker config in a Secret. Unlike JavaScript's JSON.parse
 * errors, these quote at most the one offending character, never the surrounding text, which may
 * be a credential. Iterative, so deep nesting cannot exhaust the stack.
 */

const END_OF_INPUT = 'unexpected end of JSON input';

/** What the scanner expects next. */
type Expect =
  | 'value' // the beginning of a value
  | 'value-or-close' // after `[`: a value or `]`
  | 'key-or-close' // after `{`: a key string or `}`
  | 'key' // after `,` in an object
  | 'colon' // after a key
  | 'object-next' // after a member: `,` or `}`
  | 'array-next' // after an element: `,` or `]`
  | 'done'; // after the top-level value

const isSpace = (c: number): boolean => c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;
const isDigit = (c: number): boolean => c >= 0x30 && c <= 0x39;
const isHex = (c: number): boolean => isDigit(c) || (c >= 0x61 && c <= 0x66) || (c >= 0x41 && c <= 0x46);

const GO_ESCAPES: Record<number, string> = { 7: '\\a', 8: '\\b', 9: '\\t', 10: '\\n', 11: '\\v', 12: '\\f', 13: '\\r' };

/** A byte as Go's scanner quotes it: quoteChar, i.e. strconv.Quote of the rune with that value. */
export function quoteChar(c: number): string {
  if (c === 0x27) return "'\\''";
  if (c === 0x22) return `'"'`;
  if (c === 0x5c) return "'\\\\'";
  if (GO_ESCAPES[c]) return `'${GO_ESCAPES[c]}'`;
  if (c < 0x20 || c === 0x7f) return `'\\x${c.toString(16).padStart(2, '0')}'`;
  // Latin-1 controls, the no-break space and the soft hyphen are not printable to Go.
  if ((c >= 0x80 && c <= 0xa0) || c === 0xad) return `'\\u${c.toString(16).padStart(4, '0')}'`;
  return `'${String.fromCharCode(c)}'`;
}

const invalid = (c: number, context: string): string => `invalid character ${quoteChar(c)} ${context}`;

/** Go's syntax error for `bytes`, or undefined when they are one valid JSON value. */
export function goJsonSyntaxError(bytes: Uint8Array): string | undefined {
  const stack: number[] = []; // 0x7b `{` or 0x5b `[` for each open container
  let expect: Expect = 'value';
  let i = 0;
  /** After a value: what the enclosing container (or the top level) expects. */
  const afterValue = (): Expect => (stack.length === 0 ? 'done' : stack[stack.length - 1] === 0x7b ? 'object-next' : 'array-next');

  /** Scans a string from its opening quote; answers an error, or undefined with `i` past it. */
  const scanString = (): string | undefined => {
    i++;
    for (;;) {
      if (i >= bytes.length) return END_OF_INPUT;
      const c = bytes[i]!;
      if (c === 0x22) {
        i++;
        return undefined;
      }
      if (c < 0x20) return invalid(c, 'in string literal');
      if (c !== 0x5c) {
        i++;
        continue;
      }
      i++;
      if (i >= bytes.length) return END_OF_INPUT;
      const e = bytes[i]!;
      if (e === 0x75) {
        for (let k = 1; k <= 4; k++) {
          if (i + k >= bytes.length) return END_OF_INPUT;
          if (!isHex(bytes[i + k]!)) return invalid(bytes[i + k]!, 'in \\u hexadecimal character escape');
        }
        i += 5;
      } else if ('"\\/bfnrt'.includes(String.fromCharCode(e))) i++;
      else return invalid(e, 'in string escape code');
    }
  };

  /** Scans a number; at its end `i` is at the first byte after it. */
  const scanNumber = (): string | undefined => {
    if (bytes[i] === 0x2d) {
      i++;
      if (i >= bytes.length) return END_OF_INPUT;
      if (!isDigit(bytes[i]!)) return invalid(bytes[i]!, 'in numeric literal');
    }
    if (bytes[i] === 0x30) i++;
    else while (i < bytes.length && isDigit(bytes[i]!)) i++;
    if (bytes[i] === 0x2e) {
      i++;
      if (i >= bytes.length) return END_OF_INPUT;
      if (!isDigit(bytes[i]!)) return invalid(bytes[i]!, 'after decimal point in numeric literal');
      while (i < bytes.length && isDigit(bytes[i]!)) i++;
    }
    if (bytes[i] === 0x65 || bytes[i] === 0x45) {
      i++;
      if (bytes[i] === 0x2b || bytes[i] === 0x2d) i++;
      if (i >= bytes.length) return END_OF_INPUT;
      if (!isDigit(bytes[i]!)) return invalid(bytes[i]!, 'in exponent of numeric literal');
      while (i < bytes.length && isDigit(bytes[i]!)) i++;
    }
    return undefined;
  };

  const scanLiteral = (word: string): string | undefined => {
    for (let k = 1; k < word.length; k++) {
      if (i + k >= bytes.length) return END_OF_INPUT;
      if (bytes[i + k] !== word.charCodeAt(k)) return invalid(bytes[i + k]!, `in literal ${word} (expecting '${word[k]}')`);
    }
    i += word.length;
    return undefined;
  };

  for (;;) {
    while (i < bytes.length && isSpace(bytes[i]!)) i++;
    if (i >= bytes.length) return expect === 'done' ? undefined : END_OF_INPUT;
    const c = bytes[i]!;
    let problem: string | undefined;
    switch (expect) {
      case 'done':
        return invalid(c, 'after top-level value');
      case 'colon':
        if (c !== 0x3a) return invalid(c, 'after object key');
        i++;
        expect = 'value';
        continue;
      case 'object-next':
      case 'array-next': {
        const close = expect === 'object-next' ? 0x7d : 0x5d;
        if (c === 0x2c) {
          i++;
          expect = expect === 'object-next' ? 'key' : 'value';
        } else if (c === close) {
          i++;
          stack.pop();
          expect = afterValue();
        } else {
          return invalid(c, expect === 'object-next' ? 'after object key:value pair' : 'after array element');
        }
        continue;
      }
      case 'key-or-close':
      case 'key':
        if (c === 0x7d && expect === 'key-or-close') {
          i++;
          stack.pop();
          expect = afterValue();
          continue;
        }
        if (c !== 0x22) return invalid(c, 'looking for beginning of object key string');
        problem = scanString();
        if (problem) return problem;
        expect = 'colon';
        continue;
      case 'value-or-close':
        if (c === 0x5d) {
          i++;
          stack.pop();
          expect = afterValue();
          continue;
        }
        break;
      case 'value':
        break;
    }
    // The beginning of a value.
    if (c === 0x7b || c === 0x5b) {
      stack.push(c);
      i++;
      expect = c === 0x7b ? 'key-or-close' : 'value-or-close';
      continue;
    }
    if (c === 0x22) problem = scanString();
    else if (c === 0x2d || isDigit(c)) problem = scanNumber();
    else if (c === 0x74) problem = scanLiteral('true');
    else if (c === 0x66) problem = scanLiteral('false');
    else if (c === 0x6e) problem = scanLiteral('null');
    else return invalid(c, 'looking for beginning of value');
    if (problem) return problem;
    expect = afterValue();
  }
}
