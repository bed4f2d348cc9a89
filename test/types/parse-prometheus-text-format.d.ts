/** Minimal types for parse-prometheus-text-format 1.x (the package ships none). */
declare module 'parse-prometheus-text-format' {
  export interface PrometheusSample {
    value?: string;
    labels?: Record<string, string>;
    timestamp_ms?: string;
    /** Histograms and summaries (flattened). */
    buckets?: Record<string, string>;
    quantiles?: Record<string, string>;
    count?: string;
    sum?: string;
  }

  export interface PrometheusFamily {
    name: string;
    help: string;
    /** COUNTER, GAUGE, HISTOGRAM, SUMMARY or UNTYPED. */
    type: string;
    metrics: PrometheusSample[];
  }

  /** Throws InvalidLineError on a malformed line. */
  export default function parsePrometheusTextFormat(text: string): PrometheusFamily[];
}
