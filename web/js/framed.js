// One buffer holding a JSON header and bytes: a little-endian uint32 header length, the UTF-8 JSON
// header, then the body. The layout of the entries kept between visits (startup-cache.js) and of package
// bundles (package-bundle.js, written by server/package_bundle.py).

// {header, body} of a framed buffer (a Uint8Array).
export function unframe(bytes) {
  const headerLength = new DataView(bytes.buffer, bytes.byteOffset).getUint32(0, true);
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(4, 4 + headerLength)));
  return { header, body: bytes.subarray(4 + headerLength) };
}

// A Blob framing `header` (JSON-serialisable) with `parts` (typed arrays) as the body. The header
// is padded with spaces so the body starts 8-byte aligned: a reader can view it as 32- or 64-bit
// words in place.
export function frame(header, parts) {
  const json = new TextEncoder().encode(JSON.stringify(header));
  const encoded = new Uint8Array(json.length + ((8 - ((4 + json.length) % 8)) % 8)).fill(0x20);
  encoded.set(json);
  const length = new Uint8Array(4);
  new DataView(length.buffer).setUint32(0, encoded.length, true);
  return new Blob([length, encoded, ...parts], { type: "application/octet-stream" });
}
