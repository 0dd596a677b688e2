// What the registry's error answers mean to a person: one sentence per status, with the
// server's detail (a string, or FastAPI's list of field errors) after it.

const MEANING = {
  400: "The request could not be read",
  401: "The owner token is missing",
  403: "This browser does not hold the owner token of that model",
  404: "It is not on the server (any more)",
  413: "The model file is too large for this server",
  422: "The server refused it",
  429: "Too many requests from this browser",
  503: "The server is busy with other uploads",
};

function detailText(detail) {
  if (typeof detail === "string") return detail;
  if (Array.isArray(detail)) {
    return detail.map((item) => `${(item.loc ?? []).slice(1).join(".") || "request"}: ${item.msg}`).join("; ");
  }
  return "";
}

// An Error whose message names the status's meaning, the server's detail and, for 429 and 503,
// when to try again (Retry-After).
export async function apiError(response) {
  let detail = "";
  try {
    detail = detailText((await response.json()).detail);
  } catch {
    detail = response.statusText;
  }
  const meaning = MEANING[response.status] ?? `The server answered HTTP ${response.status}`;
  const retry = response.headers.get("Retry-After");
  const wait = retry !== null && (response.status === 429 || response.status === 503) ? ` Try again in ${retry} s.` : "";
  const error = new Error(`${meaning}${detail ? `: ${detail}` : ""}.${wait}`);
  error.status = response.status;
  return error;
}

// fetch() that resolves to the response when it is ok, else rejects with apiError's Error.
export async function apiFetch(url, options) {
  const response = await fetch(url, options);
  if (!response.ok) throw await apiError(response);
  return response;
}
