// Training permits: when the server requires them (GET /api/training/policy), the page asks
// POST /api/training/permits with the training's configuration before fit starts, and hands the
// permit to the engine, which trains only within it. The local dev server requires none.
import { apiFetch } from "./api-errors.js";

let policy = null;

// The server's policy (whether permits are required, the caps of limits.py), asked once per page.
export async function trainingPolicy() {
  policy ??= apiFetch("/api/training/policy").then((response) => response.json());
  try {
    return await policy;
  } catch (error) {
    policy = null; // asked again on the next training
    throw error;
  }
}

// Resolves to the permit token for `config` ({model, samples, epochs, batch_size}), or null when
// the server requires none; rejects with the server's reason (422: a cap or the daily budget,
// 429: too many permits, with when to retry) when it refuses one.
export async function permitFor(config) {
  let required;
  try {
    required = (await trainingPolicy()).permits_required;
  } catch (error) {
    throw new Error(`Could not ask the server whether training needs a permit: ${error.message}`);
  }
  if (!required) return null;
  let granted;
  try {
    const response = await apiFetch("/api/training/permits", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(config),
    });
    granted = await response.json();
  } catch (error) {
    throw new Error(`No training permit: ${error.message}`);
  }
  return granted.permit;
}
