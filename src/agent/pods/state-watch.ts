import fs from 'node:fs';
import { RUN_STATE_FILE } from './run-spec.js';

/**
 * Watches the live pods' `state.json` (inotify, through fs.watch on each pod dir) and calls
 * `onChange` when a supervisor writes one, so the agent reports a container that started,
 * stopped or became ready at once instead of at its next reconcile pass (250 ms apart: most of
 * a pod start on an idle machine). The passes stay as they are: this only brings one forward,
 * and a pod whose dir cannot be watched is simply left to them.
 */
export class RunStateWatch {
  private readonly watchers = new Map<string, fs.FSWatcher>();

  constructor(private readonly onChange: () => void) {}

  /** Watches exactly `dirs` from now on: a watcher for each new one, the others closed. */
  keep(dirs: Iterable<string>): void {
    const wanted = new Set(dirs);
    for (const [dir, watcher] of this.watchers) {
      if (!wanted.has(dir)) {
        watcher.close();
        this.watchers.delete(dir);
      }
    }
    for (const dir of wanted) {
      if (this.watchers.has(dir)) continue;
      let watcher: fs.FSWatcher;
      try {
        // The supervisor writes state.json by a rename over it (writeFileAtomic): an event on the name.
        watcher = fs.watch(dir, { persistent: false }, (_event, file) => {
          if (file === RUN_STATE_FILE) this.onChange();
        });
      } catch {
        continue; // the dir is gone (or no inotify watch left): the passes still see it
      }
      watcher.on('error', () => {
        watcher.close();
        if (this.watchers.get(dir) === watcher) this.watchers.delete(dir);
      });
      this.watchers.set(dir, watcher);
    }
  }

  close(): void {
    for (const watcher of this.watchers.values()) watcher.close();
    this.watchers.clear();
  }
}
