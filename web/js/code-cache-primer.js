// Loads one module script and answers (code-cache.js says why): a throwaway worker of its own, so
// the script is fetched and compiled anew rather than taken from the engine worker's module map.
self.onmessage = async ({ data: url }) => {
  try {
    await import(url);
    self.postMessage("primed");
  } catch (error) {
    self.postMessage(`failed: ${error.message ?? error}`);
  }
};
