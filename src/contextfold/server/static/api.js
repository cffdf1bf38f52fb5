// What every screen shares: calls to /api/v1 with the stored key, building DOM
// nodes without ever parsing text as HTML, and number and time formats.

const KEY_NAME = "contextfold.apiKey";

export class ApiError extends Error {
  constructor(status, code, message, field) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field;
  }
}

export function storedKey() {
  return localStorage.getItem(KEY_NAME) || "";
}

export function forgetKey() {
  localStorage.removeItem(KEY_NAME);
}

let asking = null;

// One prompt for a key however many requests were refused at once.
function askKey(reason) {
  if (asking) return asking;
  const dialog = document.getElementById("key-dialog");
  const input = document.getElementById("key-input");
  document.getElementById("key-reason").textContent = reason;
  input.value = "";
  asking = new Promise((resolve) => {
    dialog.addEventListener(
      "close",
      () => {
        const key = input.value.trim();
        if (key) localStorage.setItem(KEY_NAME, key);
        document.getElementById("forget-key").hidden = !key;
        asking = null;
        resolve(key);
      },
      { once: true },
    );
  });
  dialog.showModal();
  return asking;
}

export async function api(path, { method = "GET", body } = {}) {
  for (;;) {
    const key = storedKey();
    const headers = { Accept: "application/json" };
    if (key) headers.Authorization = `Bearer ${key}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (response.status === 401) {
      if (key) forgetKey();
      const given = await askKey(
        key ? "The server refused that key: give another." : "This server needs an API key to show its sessions.",
      );
      if (!given) throw new ApiError(401, "unauthorized", "no API key given", null);
      continue;
    }
    if (response.status === 204) return null;
    const data = await response.json().catch(() => null);
    if (!response.ok) {
      const error = (data && data.error) || {};
      throw new ApiError(
        response.status,
        error.code || "http_" + response.status,
        error.message || response.statusText,
        error.field || null,
      );
    }
    return data;
  }
}

export function query(params) {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") search.set(name, String(value));
  }
  const text = search.toString();
  return text ? "?" + text : "";
}

// Children are appended as nodes or text nodes: log content is never parsed as HTML.
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "dataset") Object.assign(node.dataset, value);
    else if (name === "style") Object.assign(node.style, value);
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

const integers = new Intl.NumberFormat("en-US");

export function count(n) {
  return integers.format(n);
}

export function isoTime(seconds) {
  return new Date(seconds * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC";
}

export function ago(seconds) {
  const delta = Math.max(0, Date.now() / 1000 - seconds);
  if (delta < 60) return "just now";
  const steps = [
    [60, "min"],
    [3600, "h"],
    [86400, "d"],
  ];
  let label = "";
  for (const [size, unit] of steps) if (delta >= size) label = `${Math.floor(delta / size)} ${unit} ago`;
  return label;
}

export function timeNode(seconds) {
  return el("time", { datetime: new Date(seconds * 1000).toISOString(), title: isoTime(seconds) }, ago(seconds));
}

export function debounce(fn, ms) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

export function setCrumbs(...parts) {
  document.getElementById("crumbs").replaceChildren(...parts);
}

// The settings a refusal can name, as the page calls them.
const FIELDS = { budget: "budget", q: "search", after: "page", limit: "page size", query: "recall query" };

// A refusal in plain words: the setting by the page's name for it, then why, without
// the API's field path ("q: String should have at most 128 characters").
export function errorText(error) {
  const message = String((error && error.message) || error);
  if (!error || !error.field) return message;
  const name = FIELDS[error.field] || error.field.replace(/[._[\]]+/g, " ").trim();
  const why = message
    .replace(`${error.field}: `, "")
    .replace(/^(Input|String|Value) should/, "it should")
    .replace(/\.$/, "");
  return `The ${name} was refused: ${why.charAt(0).toLowerCase()}${why.slice(1)}.`;
}

export function errorNode(error) {
  return el("p", { class: "error", role: "alert" }, errorText(error));
}
