// The prompt a view renders for a budget, with its report in the project's words
// (left out, clipped, recalled); a message that is a fold's text says which fold it is.
import { ApiError, api, count, el, errorNode, query } from "./api.js";
import { messageCard, textOf } from "./message.js";

export class Prompt {
  // onTooSmall: the budget fell below the view's floor (a longer user message came in);
  // the caller reads the floor again and renders anew, or answers false to show the error.
  constructor(sid, onFold, onTooSmall) {
    this.sid = sid;
    this.onFold = onFold;
    this.onTooSmall = onTooSmall;
    this.asked = 0;
    this.report = el("p", { id: "report", class: "report" });
    this.list = el("ol", { id: "prompt", class: "prompt" });
    this.node = el(
      "section",
      { class: "prompt-column column", id: "prompt-section", "aria-labelledby": "prompt-title" },
      el("h2", { id: "prompt-title" }, "Prompt"),
      this.report,
      this.list,
    );
  }

  empty(text) {
    this.report.replaceChildren(el("span", { class: "muted" }, text));
    this.list.replaceChildren();
  }

  // Only the latest request draws: slider moves can answer out of order.
  async render(view, budget, folds, branch = null) {
    const asked = ++this.asked;
    const path = `/api/v1/sessions/${encodeURIComponent(this.sid)}/views/${encodeURIComponent(view)}/render`;
    let data;
    try {
      data = await api(path + query({ budget, branch }));
    } catch (error) {
      if (asked !== this.asked) return;
      if (!(error instanceof ApiError)) throw error;
      if (error.code === "budget_too_small" && this.onTooSmall && (await this.onTooSmall())) return;
      this.report.replaceChildren(errorNode(error));
      this.report.dataset.tokens = "";
      this.list.replaceChildren();
      return;
    }
    if (asked !== this.asked) return;
    this.draw(data, folds);
  }

  draw(data, folds) {
    const report = data.report;
    const byText = new Map();
    for (const fold of folds) if (report.folds.includes(fold.id)) byText.set(fold.text, fold);
    // A fold's message ends with the range it names to the model ([folded: seq A-B]).
    const unlabelled = (text) => text.replace(/\n?\[folded: seq \d+-\d+\]$/, "");
    Object.assign(this.report.dataset, {
      tokens: report.tokens,
      budget: report.budget,
      folds: report.folds.length,
      omitted: report.omitted,
    });
    const used = report.budget === null ? `${count(report.tokens)} tokens` : `${count(report.tokens)} of ${count(report.budget)} tokens`;
    this.report.replaceChildren(el("b", {}, used), " · " + reportParts(data.messages.length, report).join(" · "));
    this.list.replaceChildren(
      ...data.messages.map((message, index) => {
        const fold = byText.get(unlabelled(textOf(message.content)));
        const standIn = fold ? null : provisionalOf(message, report.provisional || []);
        if (standIn) {
          const label = `provisional fold #${standIn.start}–#${standIn.end} · until the view's fold lands`;
          return el("li", { dataset: { index } }, messageCard(message, { label, attrs: { "data-provisional": standIn.id } }));
        }
        const label = fold ? `fold #${fold.start}–#${fold.end} · ${fold.kind}` : null;
        const onLabel = fold ? () => this.onFold(fold) : undefined;
        return el("li", { dataset: { index } }, messageCard(message, { label, onLabel, attrs: fold ? { "data-fold": fold.id } : {} }));
      }),
    );
  }
}

// A provisional fold (made at render, without a model, where the budget would cut) is
// known by the range its message names to the model: [folded: seq A-B].
function provisionalOf(message, provisional) {
  const found = /\[folded: seq (\d+)-(\d+)\]$/.exec(textOf(message.content));
  if (!found) return null;
  return provisional.find((p) => p.start === Number(found[1]) && p.end === Number(found[2])) || null;
}

function plural(n, word) {
  return `${count(n)} ${word}${n === 1 ? "" : "s"}`;
}

// What render did to fit: "left out" is what the budget cut, "clipped" what it shortened.
export function reportParts(messages, report) {
  const parts = [plural(messages, "message"), plural(report.folds.length, "fold")];
  if (report.whole) parts.push("nothing left out or clipped");
  const standing = (report.provisional || []).length;
  if (standing) parts.push(`${plural(standing, "provisional fold")} standing in until the view's fold lands`);
  if (report.omitted) parts.push(`${plural(report.omitted, "logged message")} left out by the budget`);
  if (report.clipped.length) parts.push(`clipped to fit: ${report.clipped.map((seq) => "#" + seq).join(", ")}`);
  if (!report.whole && !report.omitted && !report.clipped.length) parts.push("a fold clipped to fit");
  if (report.recalled.length) parts.push(`${plural(report.recalled.length, "message")} recalled from the log`);
  return parts;
}
