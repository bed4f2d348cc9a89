import fs from 'node:fs';
import path from 'node:path';

/**
 * `token-file`: the cluster token read from a file, so it never has to be on a command line
 * (argv is readable by every local user through ps and /proc/<pid>/cmdline, a file is not).
 *
 * The file is held to the standard of the token itself: one readable by every user of the
 * machine is refused, since it would expose the token as widely as a flag does (as ssh refuses
 * an unprotected private key). One readable by its group is accepted with a warning: a group
 * shared with a service account is a deliberate choice, and a common one.
 */

export interface TokenFileResult {
  token: string;
  warnings: string[];
}

/** Reads and checks the token file; throws TokenFileError with the reason. */
export class TokenFileError extends Error {
  override name = 'TokenFileError';
}

function why(error: unknown): string {
  const code = (error as NodeJS.ErrnoException).code;
  if (code === 'ENOENT') return 'it does not exist';
  if (code === 'EACCES') return 'permission denied';
  return `cannot read it: ${code ?? (error as Error).message}`;
}

export function readTokenFile(file: string, source: string): TokenFileResult {
  const absolute = path.resolve(file);
  const where = `token-file ${absolute} (${source})`;
  let stat: fs.Stats;
  try {
    // Follows symbolic links: what matters is who can read the content.
    stat = fs.statSync(absolute);
  } catch (error) {
    throw new TokenFileError(`${where}: ${why(error)}`);
  }
  if (stat.isDirectory()) throw new TokenFileError(`${where}: is a directory, not a file`);
  const warnings: string[] = [];
  const mode = (stat.mode & 0o777).toString(8).padStart(4, '0');
  if (stat.mode & 0o004) {
    throw new TokenFileError(`${where}: is readable by every user (mode ${mode}); make it private: chmod 600 ${absolute}`);
  }
  if (stat.mode & 0o040) {
    warnings.push(`${where}: is readable by its group (mode ${mode}); chmod 600 ${absolute} unless that group is meant to hold the token`);
  }
  let text: string;
  try {
    text = fs.readFileSync(absolute, 'utf8');
  } catch (error) {
    throw new TokenFileError(`${where}: ${why(error)}`);
  }
  const token = text.trim();
  if (!token) throw new TokenFileError(`${where}: is empty`);
  if (/\s/.test(token)) throw new TokenFileError(`${where}: holds more than one word; it must hold only the token`);
  return { token, warnings };
}
