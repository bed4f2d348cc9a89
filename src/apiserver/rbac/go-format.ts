/**
 * Go's `%q` formatting, which kube-apiserver's RBAC messages use: users compare these messages
 * with what a real cluster prints (and scripts grep them), so they must come out byte for byte.
 */

const NAMED_ESCAPES: Record<string, string> = {
  '\x07': '\\a',
  '\b': '\\b',
  '\f': '\\f',
  '\n': '\\n',
  '\r': '\\r',
  '\t': '\\t',
  '\v': '\\v',
  '"': '\\"',
  '\\': '\\\\',
};

/** Printable ASCII without `"` and `\`: quoted by Go exactly as it is. */
const PLAIN = /^[\x20-\x21\x23-\x5b\x5d-\x7e]*$/;

/** strconv.Quote for the strings RBAC messages hold: printable text kept, control characters escaped. */
export function goQuote(text: string): string {
  // Names are almost always plain printable ASCII, which Go quotes as is: every allowed request's
  // reason quotes four of them.
  if (PLAIN.test(text)) return `"${text}"`;
  let out = '"';
  for (const char of text) {
    const named = NAMED_ESCAPES[char];
    if (named) {
      out += named;
      continue;
    }
    const code = char.codePointAt(0)!;
    if (code < 0x20 || code === 0x7f) out += `\\x${code.toString(16).padStart(2, '0')}`;
    else if ((code >= 0x80 && code < 0xa0) || code === 0x2028 || code === 0x2029) out += `\\u${code.toString(16).padStart(4, '0')}`;
    else out += char;
  }
  return `${out}"`;
}

/** `%q` of a []string: `["a" "b"]`, space-separated as Go prints slices. */
export function goQuoteList(items: readonly string[]): string {
  return `[${items.map(goQuote).join(' ')}]`;
}

/**
 * utilerrors.NewAggregate(errs).Error(): one message alone, several deduplicated in `[a, b]`.
 * (Used for the resolution errors an RBAC denial carries as its reason.)
 */
export function aggregateMessages(messages: readonly string[]): string {
  const unique = [...new Set(messages)];
  if (unique.length <= 1) return unique[0] ?? '';
  return `[${unique.join(', ')}]`;
}
