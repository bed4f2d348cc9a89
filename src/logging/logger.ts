import { pino, type Logger as PinoLogger } from 'pino';

/**
 * Structured logs (one JSON object a line) with ISO times and level names. Anything that could
 * carry a secret is redacted by key, so a careless `log.info({ token })` still prints nothing.
 */

export type Logger = PinoLogger;
export type LogLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal' | 'silent';
export const LOG_LEVELS: readonly LogLevel[] = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'];

const SECRET_KEYS = ['token', 'password', 'secret', 'key', 'authorization', 'privateKey'];

export function createLogger(level: LogLevel = 'info', component = 'drover'): Logger {
  return pino({
    name: component,
    level,
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
    base: { pid: process.pid },
    redact: {
      paths: [...SECRET_KEYS, ...SECRET_KEYS.map((k) => `*.${k}`), 'req.headers.authorization'],
      censor: '[redacted]',
    },
  });
}
