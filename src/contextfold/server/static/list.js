// The sessions list: search by id (?q=), counts, last activity, a page at a time.
import { api, count, debounce, el, errorNode, query, setCrumbs, timeNode } from "./api.js";

const PAGE = 50;

export function showList(root) {
  const params = new URLSearchParams(location.search);
  const state = { q: params.get("q") || "", cursors: [null] };
  setCrumbs(el("span", {}, "Sessions"));

  const search = el("input", {
    type: "search",
    id: "search",
    name: "q",
    value: state.q,
    placeholder: "Search session ids",
    "aria-label": "Search session ids",
    autocomplete: "off",
    spellcheck: "false",
  });
  const list = el("ul", { id: "sessions", class: "sessions" });
  const status = el("p", { id: "list-status", class: "muted" });
  const prev = el("button", { type: "button", id: "prev-page", disabled: true }, "‹ Previous");
  const next = el("button", { type: "button", id: "next-page", disabled: true }, "Next ›");

  async function load() {
    const after = state.cursors[state.cursors.length - 1];
    status.textContent = "Loading…";
    let data;
    try {
      data = await api("/api/v1/sessions" + query({ q: state.q, after, limit: PAGE }));
    } catch (error) {
      status.replaceChildren(errorNode(error));
      return;
    }
    list.replaceChildren(...data.sessions.map(row));
    const page = state.cursors.length;
    status.textContent = data.sessions.length
      ? `Page ${page}: ${data.sessions.length} session${data.sessions.length === 1 ? "" : "s"}`
      : state.q
        ? `No session id contains “${state.q}”.`
        : "No sessions yet.";
    prev.disabled = page === 1;
    next.disabled = !data.next;
    next.dataset.cursor = data.next || "";
  }

  search.addEventListener(
    "input",
    debounce(() => {
      state.q = search.value.trim();
      state.cursors = [null];
      history.replaceState(null, "", "/" + query({ q: state.q }));
      load();
    }, 250),
  );
  next.addEventListener("click", () => {
    state.cursors.push(next.dataset.cursor);
    load();
  });
  prev.addEventListener("click", () => {
    state.cursors.pop();
    load();
  });

  root.replaceChildren(
    el(
      "section",
      { class: "list-page" },
      el("h1", {}, "Sessions"),
      el("div", { class: "toolbar" }, search, status),
      el(
        "div",
        { class: "session-head", "aria-hidden": "true" },
        el("span", {}, "Session"),
        el("span", {}, "Messages"),
        el("span", {}, "Tokens"),
        el("span", {}, "Last activity"),
      ),
      list,
      el("nav", { class: "pager", "aria-label": "Pages" }, prev, next),
    ),
  );
  load();
}

function row(session) {
  const title = session.meta && typeof session.meta.title === "string" ? session.meta.title : "";
  return el(
    "li",
    { class: "session-row", dataset: { id: session.id } },
    el(
      "a",
      { class: "session-id", href: "/sessions/" + encodeURIComponent(session.id) },
      session.id,
      title ? el("span", { class: "muted small session-title" }, title) : null,
    ),
    el("span", { class: "stat", "data-label": session.messages === 1 ? "message" : "messages" }, count(session.messages)),
    el("span", { class: "stat", "data-label": session.tokens === 1 ? "token" : "tokens" }, count(session.tokens)),
    el("span", { class: "stat when" }, timeNode(session.last_at)),
  );
}
