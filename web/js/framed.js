// One buffer holding a JSON header and bytes: a little-endian uint32 header length, the UTF-8 JSON
// header, then the body. The layout of the Cache API entries (startup-cache.js) and of package
// bundles (package-bundle.js, written by server/package_bundle.py).

// {header, body} of a framed buffer (a Uint8Array).
export function unframe(bytes) {
  const headerLength = new DataView(bytes.buffer, bytes.byteOffset).getUint32(0, true);
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(4, 4 + headerLength)));
  return { header, body: bytes.subarray(4 + headerLength) };
}

// A Blob framing `header` (JSON-serialisable) with `parts` (typed arrays) as the body.
export function frame(header, parts) {
  const encoded = new TextEncoder().encode(JSON.stringify(header));
  const length = new Uint8Array(4);
  new DataView(length.buffer).setUint32(0, encoded.length, true);
  return new Blob([length, encoded, ...parts], { type: "application/octet-stream" });
}
