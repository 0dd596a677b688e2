// The page `py-in-browser setup` opens in headless Chromium (server/snapshot_maker.py): makes the
// runtime snapshot of the current engine build, as a first visit would after ready, and posts it
// to the set-up's upload address (or why it failed), so the server can offer it to first visits.
import { buildVersion, makeSnapshot } from "./runtime-snapshot.js";

const upload = new URLSearchParams(location.search).get("upload");

async function made() {
  const engine = await (await fetch("/api/engine")).json();
  return makeSnapshot({
    indexURL: engine.runtime_url,
    version: buildVersion(engine),
    bundleURLs: [engine.numpy_bundle_url, engine.bundle_url],
  });
}

made().then(
  (snapshot) => fetch(upload, { method: "POST", body: snapshot }),
  (error) => fetch(`${upload}&failed=${encodeURIComponent(error.message ?? String(error))}`, { method: "POST" }),
);
