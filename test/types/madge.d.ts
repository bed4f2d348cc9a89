/** Minimal types for madge 8 (the package ships none): the parts the import-graph test uses. */
declare module 'madge' {
  export interface MadgeConfig {
    fileExtensions?: string[];
    tsConfig?: string;
    detectiveOptions?: Record<string, unknown>;
  }
  export interface MadgeResult {
    /** Each file (relative to the base dir) and the files it imports. */
    obj(): Record<string, string[]>;
    /** Each import cycle as the files along it. */
    circular(): string[][];
    warnings(): { skipped: string[] };
  }
  export default function madge(path: string, config?: MadgeConfig): Promise<MadgeResult>;
}
