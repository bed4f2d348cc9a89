/** Prometheus text exposition format, version 0.0.4 (kept apart so callers need not load prom-client). */
export const METRICS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';
