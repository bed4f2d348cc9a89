/**
 * Boolean query parameters (`watch`, `allowWatchBookmarks`, `follow`, `previous`…), read the way
 * kube-apiserver reads them. Its query decoding (apimachinery's `runtime` conversion from
 * `url.Values` to a bool, used for ListOptions, PodLogOptions and DeleteOptions, and the request-info
 * code that picks the `watch` verb) takes only the first value, and treats `0` and `false` in any
 * letter case as false and **every other value as true**, including an empty one (`?watch`,
 * `?watch=`), `True` (what the official Python client sends) and `yes`. An absent parameter is
 * false. So there is no malformed boolean: every value means something, as it does upstream.
 *
 * Every boolean parameter the server (and an agent's log endpoint) acts on goes through here, so
 * they cannot drift apart again (they once took only `true` and `1`, and a Python `watch=True`
 * came back as a plain list).
 */

/** kube-apiserver's reading of one boolean query value; `null` (absent) is false. */
export function parseQueryBool(value: string | null): boolean {
  if (value === null) return false;
  return value !== '0' && value.toLowerCase() !== 'false';
}

/** The boolean query parameter `name` (its first value), as kube-apiserver reads it. */
export function queryBool(params: URLSearchParams, name: string): boolean {
  return parseQueryBool(params.get(name));
}
