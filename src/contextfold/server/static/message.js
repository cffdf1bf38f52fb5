// One chat message as a card, for the history and the prompt alike.
import { count, el, timeNode } from "./api.js";

const CLIP = 500;

export function textOf(content) {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content
      .map((part) => {
        if (part && part.type === "text") return part.text;
        if (part && part.type) return `[${part.type}]`;
        return JSON.stringify(part);
      })
      .join("\n");
  }
  return JSON.stringify(content, null, 2);
}

// Long tool output stays readable: the first part, and the rest on request.
function contentNode(text) {
  const body = el("div", { class: "content" });
  if (text.length <= CLIP) {
    body.textContent = text;
    return body;
  }
  body.textContent = text.slice(0, CLIP) + "…";
  const more = el("button", { type: "button", class: "link more" }, `Show all (${count(text.length)} characters)`);
  more.addEventListener("click", () => {
    body.textContent = text;
    more.remove();
  });
  return el("div", {}, body, more);
}

function toolCalls(calls) {
  return calls.map((call) => {
    const fn = call.function || {};
    return el(
      "div",
      { class: "tool-call" },
      el("span", { class: "tag" }, "call"),
      el("code", {}, `${fn.name || "?"}(${fn.arguments || ""})`),
      call.id ? el("span", { class: "muted small" }, ` ${call.id}`) : null,
    );
  });
}

// extra: {seq, tokens, created_at, label, onLabel, attrs} -- whatever the caller knows.
export function messageCard(message, extra = {}) {
  const role = String(message.role || "?");
  const head = el(
    "header",
    {},
    extra.seq !== undefined ? el("span", { class: "seq" }, `#${extra.seq}`) : null,
    el("span", { class: "role" }, role),
    message.name ? el("span", { class: "name" }, String(message.name)) : null,
    message.tool_call_id ? el("span", { class: "muted small" }, `→ ${message.tool_call_id}`) : null,
    extra.label
      ? el("button", { type: "button", class: "fold-tag", title: "Show its range in the log", onclick: extra.onLabel }, extra.label)
      : null,
    el("span", { class: "spacer" }),
    extra.tokens !== undefined ? el("span", { class: "tok" }, `${count(extra.tokens)} tokens`) : null,
    extra.created_at !== undefined ? timeNode(extra.created_at) : null,
  );
  const text = textOf(message.content);
  return el(
    "article",
    { class: `msg role-${role.replace(/[^a-z_]/g, "")}`, ...(extra.attrs || {}) },
    head,
    text ? contentNode(text) : null,
    message.tool_calls ? toolCalls(message.tool_calls) : null,
  );
}
