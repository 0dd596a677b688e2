// Whether the engine's downloads came from the browser's HTTP cache, so a second visit shows what
// it reused (pib.startup.http_cache).
//
// The server stamps every file it sends with the moment it sent it (X-Served-At, server/static.py)
// and the page's engine description with the moment it served the page (`served_at`): a download
// stamped before the page was served is a copy the browser kept. Resource timing's transferSize
// would tell without the server's help, but WebKit reports 0 for every size, a download's too, and
// gives module scripts it reuses no entry at all.

const stamps = new Map(); // absolute URL -> the server's stamp on its response (ms), or NaN

// When the server sent `response` (ms, NaN without a stamp).
export function stampOf(response) {
  return Number(response.headers.get("X-Served-At") ?? NaN);
}

// Notes when the server sent the download of `url` (stampOf its response); the engine's downloads
// pass through here, the page's (engine-downloads.js) by message.
export function noteStamp(url, stamp) {
  stamps.set(new URL(url, self.location.href).href, stamp);
}

export function noteResponse(response) {
  noteStamp(response.url, stampOf(response));
}

// Whether every one of `urls` came from the HTTP cache on a page the server served at
// `pageServedAt` (its engine description's served_at); null when one was not downloaded here or
// carries no stamp.
export function fromHttpCache(urls, pageServedAt) {
  const served = urls.map((url) => stamps.get(new URL(url, self.location.href).href));
  const page = Number(pageServedAt);
  if (!Number.isFinite(page) || served.some((stamp) => !Number.isFinite(stamp))) return null;
  return served.every((stamp) => stamp < page);
}
