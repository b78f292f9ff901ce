// The console's link to the gateway: the busgate JavaScript client, the same module a user's page
// imports (/sdk/busgate.js, built from clients/js), with the API key kept in this browser, and
// error texts for people. Every call the views make goes through `bus`.
//
// Authentication: the API key the user entered once is kept in localStorage and read at every
// call; the client sends it as `Authorization: Bearer <key>` when it looks like a JWT, as
// `X-API-Key` otherwise, and as `?key=` on /ws (a WebSocket cannot set headers).

import { Busgate, BusgateError } from "./sdk/busgate.js";

export { BusgateError };

const KEY_STORAGE = "busgate.apiKey";

/** The API key kept in this browser, or "". */
export function apiKey() {
  return localStorage.getItem(KEY_STORAGE) || "";
}

/** Keep (or forget, with "") the API key in this browser. */
export function setApiKey(key) {
  if (key) localStorage.setItem(KEY_STORAGE, key.trim());
  else localStorage.removeItem(KEY_STORAGE);
}

/** The gateway that served this page, with the key of the moment. */
export const bus = new Busgate(new URL(".", location.href), { key: apiKey });

/** A sentence for people: what went wrong and what to do. */
export function explain(error) {
  if (!(error instanceof BusgateError)) return String(error?.message ?? error);
  if (error.status === 0 && error.code === "network") return `Cannot reach the gateway: ${error.message}`;
  if (error.status === 0) return error.message;
  if (error.status === 401 && apiKey()) {
    return `The gateway refused this API key (${error.message}): enter another with the key button.`;
  }
  if (error.status === 401) return "The gateway wants an API key: enter one with the key button.";
  if (error.status === 403) return `This API key may not do that (${error.message}).`;
  const code = error.code ? ` ${error.code}` : "";
  return `HTTP ${error.status}${code}: ${error.message}`;
}
