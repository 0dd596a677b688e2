// Chromium keeps a script's compiled code (V8's code cache) only from the second time the script
// is loaded out of the HTTP cache, and uses it from the third: a user's second visit would compile
// the runtime's 1.2 MB pyodide.asm.js again (~60-120 ms here). A first visit that restored the
// server's snapshot loaded it once, so it loads it once more while idle; the second visit then
// starts from compiled code. (A first visit without a snapshot loads it twice anyway: the snapshot
// worker starts a runtime of its own.)
import { askWorker } from "./one-shot-worker.js";

// Loads the module script at `url` in a throwaway worker; resolves to "primed" or "failed: ...".
export function primeCodeCache(url) {
  const primer = new URL("./code-cache-primer.js", import.meta.url);
  return askWorker(primer, new URL(url, self.location.href).href);
}
