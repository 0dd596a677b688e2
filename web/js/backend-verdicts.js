// What backend selection learned (py_in_browser/backends/verdicts.py: self-tests passed, measured
// choices), kept between visits as an entry of startup-cache.js. It holds only for the browser,
// the GPU and driver, and the engine build it was learned on, so its version is a fingerprint of
// exactly those: the user agent (browser and its version), the GPU probe (renderer, adapter,
// features and limits) and the build's digest. Any change starts selection afresh.
import { checkEntry, openEntry, writeEntry } from "./startup-cache.js";

const ENTRY = "pib-backend-verdicts";

// The stored entry, opened while the runtime starts (checked once the fingerprint is known).
export function openVerdicts() {
  return openEntry(ENTRY);
}

export function verdictsVersion(build, environment) {
  return JSON.stringify({ build, userAgent: navigator.userAgent, environment });
}

// What to hand Python (_worker.boot): the kept verdicts for `version`, "" when none hold for it,
// or null where nothing can be kept (Python then neither uses nor records verdicts).
export async function keptVerdicts(opened, version) {
  const entry = checkEntry(await opened, version);
  if (entry.state === "unavailable") return null;
  return entry.state === "loaded" ? entry.header.verdicts : "";
}

export function storeVerdicts(version, verdicts) {
  return writeEntry(ENTRY, { version, verdicts }, []);
}
