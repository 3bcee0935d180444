/**
 * `config check --print` writes a secret inside a URL as `***` (`postgres://relay:***@db/relay`) and
 * names the other secrets instead of printing them. Fed back as a config file, such a value would
 * load as a wrong secret, and the failure would surface later as the server's (`password
 * authentication failed`) blamed on the variable the key usually comes from. The loader refuses it
 * at once instead, naming the key and where it came from.
 */
const MASK = '***';

function maskedPart(value: string): string | undefined {
  if (value === MASK) return 'the value';
  let u: URL;
  try {
    u = new URL(value);
  } catch {
    return /\/\/[^/?#]*\*\*\*[^/?#]*@/.test(value) ? 'its credentials' : undefined;
  }
  if (!u.protocol || !value.includes(MASK)) return undefined;
  if (u.password === MASK || decodeURIComponent(u.password) === MASK) return 'its password';
  if (u.username === MASK || decodeURIComponent(u.username) === MASK) return 'its user name';
  for (const [name, v] of new URLSearchParams(u.search)) if (v === MASK) return `its query parameter ${name}`;
  return undefined;
}

/** One problem per value that is the redaction mask (or a URL holding it), named by dotted key and source. */
export function redactedValueProblems(tree: unknown, from: (key: string) => string, path: string[] = []): string[] {
  if (typeof tree === 'string') {
    const part = maskedPart(tree);
    if (!part) return [];
    const key = path.join('.');
    return [
      `${key} (${from(key)}): ${part} is "***", the mask \`config check --print\` writes in place of a secret, not the secret: set the real value (the printed file's header names where each secret came from)`,
    ];
  }
  if (Array.isArray(tree)) return tree.flatMap((v, i) => redactedValueProblems(v, from, [...path, String(i)]));
  if (tree && typeof tree === 'object') return Object.entries(tree).flatMap(([k, v]) => redactedValueProblems(v, from, [...path, k]));
  return [];
}
