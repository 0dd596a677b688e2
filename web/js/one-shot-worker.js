// A module worker asked one question: posts `message`, resolves to its first answer (or to
// "failed: ..." when the worker cannot load or throws), and ends the worker either way.
export function askWorker(url, message) {
  const worker = new Worker(url, { type: "module" });
  return new Promise((resolve) => {
    const finish = (outcome) => {
      worker.terminate();
      resolve(outcome);
    };
    worker.onmessage = ({ data }) => finish(data);
    worker.onerror = (event) => finish(`failed: ${event.message}`);
    worker.postMessage(message);
  });
}
