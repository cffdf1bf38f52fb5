// The prompt a view renders for a budget, with its report; a message that is a
// fold's text says which fold it is.
import { ApiError, api, count, el, errorNode, query } from "./api.js";
import { messageCard, textOf } from "./message.js";

export class Prompt {
  constructor(sid, onFold) {
    this.sid = sid;
    this.onFold = onFold;
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
  async render(view, budget, folds) {
    const asked = ++this.asked;
    const path = `/api/v1/sessions/${encodeURIComponent(this.sid)}/views/${encodeURIComponent(view)}/render`;
    let data;
    try {
      data = await api(path + query({ budget }));
    } catch (error) {
      if (asked !== this.asked) return;
      if (!(error instanceof ApiError)) throw error;
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
    Object.assign(this.report.dataset, {
      tokens: report.tokens,
      budget: report.budget,
      folds: report.folds.length,
      omitted: report.omitted,
    });
    const clipped = report.clipped.length ? `clipped seq ${report.clipped.join(", ")}` : "nothing clipped";
    this.report.replaceChildren(
      el("b", {}, `${count(report.tokens)} / ${count(report.budget)} tokens`),
      ` · ${data.messages.length} messages · ${report.folds.length} fold${report.folds.length === 1 ? "" : "s"}` +
        ` · ${count(report.omitted)} omitted · ${clipped}`,
      report.whole ? " · whole history" : "",
    );
    this.list.replaceChildren(
      ...data.messages.map((message, index) => {
        const fold = byText.get(textOf(message.content));
        const label = fold ? `fold ${fold.start}–${fold.end} · ${fold.kind}` : null;
        const onLabel = fold ? () => this.onFold(fold) : undefined;
        return el("li", { dataset: { index } }, messageCard(message, { label, onLabel, attrs: fold ? { "data-fold": fold.id } : {} }));
      }),
    );
  }
}
