// The whole log, never folded, a page at a time; beside it, each fold as a band
// spanning the rows of the range it replaces (grid row = seq), with what it saved.
import { api, count, el, query } from "./api.js";
import { messageCard } from "./message.js";

const PAGE = 200;

export class History {
  constructor(sid, onFold) {
    this.sid = sid;
    this.onFold = onFold;
    this.branch = null; // null: every branch's messages, by seq
    this.lastSeq = 0;
    this.total = 0;
    this.flashed = null;
    this.nextAfter = 0;
    this.loading = null;
    this.folds = [];
    this.cards = new Map();
    this.grid = el("div", { id: "log", class: "log" });
    this.count = el("span", { class: "muted small", id: "history-count" });
    this.more = el(
      "button",
      { type: "button", id: "load-more", class: "more-button", onclick: () => this.loadMore() },
      "Load more",
    );
    this.node = el(
      "section",
      { class: "history column", id: "history", "aria-labelledby": "history-title" },
      el("h2", { id: "history-title" }, "Log ", this.count),
      this.grid,
      this.more,
    );
    // The next page comes when the end of the log scrolls into sight.
    this.observer = new IntersectionObserver((entries) => {
      if (entries.some((entry) => entry.isIntersecting)) this.loadMore();
    });
    this.observer.observe(this.more);
  }

  get complete() {
    return this.nextAfter === null;
  }

  loadMore() {
    if (this.loading || this.complete) return this.loading;
    this.loading = this.fetchPage().finally(() => {
      this.loading = null;
    });
    return this.loading;
  }

  async fetchPage() {
    const path = `/api/v1/sessions/${encodeURIComponent(this.sid)}/messages`;
    const data = await api(path + query({ after: this.nextAfter, limit: PAGE, branch: this.branch }));
    for (const record of data.messages) {
      if (this.cards.has(record.seq)) continue;
      const card = messageCard(record.message, {
        seq: record.seq,
        tokens: record.tokens,
        created_at: record.created_at,
        attrs: {
          "data-seq": record.seq,
          "data-parent": record.parent,
          id: `m${record.seq}`,
          style: { gridRow: String(record.seq) },
        },
      });
      // A message that does not follow the one before it starts a branch: say after which.
      if (record.parent !== record.seq - 1) {
        const after = record.parent ? `after #${record.parent}` : "as a new start";
        card.prepend(el("p", { class: "branch-mark small muted" }, `Branch: ${after}`));
      }
      this.cards.set(record.seq, card);
      this.grid.append(card);
      this.lastSeq = Math.max(this.lastSeq, record.seq);
    }
    this.nextAfter = data.next_after;
    this.more.hidden = this.complete;
    this.drawCount();
    this.drawBands();
  }

  // Show one branch (its head seq), or every branch's messages (null), from the start.
  async setBranch(branch) {
    if (this.loading) await this.loading;
    this.branch = branch;
    this.cards.clear();
    this.grid.replaceChildren();
    this.lastSeq = 0;
    this.nextAfter = 0;
    await this.loadMore();
  }

  setTotal(total) {
    this.total = total;
    this.drawCount();
  }

  drawCount() {
    const total = Math.max(this.total, this.lastSeq);
    const plural = total === 1 ? "" : "s";
    this.count.textContent =
      this.lastSeq >= total ? `${count(total)} message${plural}` : `${count(this.lastSeq)} of ${count(total)} messages`;
  }

  // New messages arrived: fetch them if the log is shown to its end already.
  async catchUp() {
    if (this.loading) await this.loading;
    if (!this.complete) return;
    this.nextAfter = this.lastSeq;
    while (!this.complete) await this.loadMore();
  }

  // From the prompt: bring the fold's first message into sight and mark its band.
  reveal(fold) {
    const card = this.cards.get(fold.start);
    if (card) card.scrollIntoView({ block: "start" });
    this.flashed = fold.id;
    for (const band of this.grid.querySelectorAll(".band")) {
      band.classList.toggle("flash", band.dataset.id === fold.id);
    }
  }

  setFolds(folds) {
    this.folds = folds;
    this.drawBands();
  }

  drawBands() {
    for (const band of this.grid.querySelectorAll(".band")) band.remove();
    const shown = this.folds.filter((fold) => fold.start <= this.lastSeq);
    const lanes = assignLanes(shown);
    const width = Math.max(1, lanes.count);
    this.grid.style.gridTemplateColumns = `repeat(${width}, min(var(--lane), calc(40% / ${width}))) minmax(0, 1fr)`;
    for (const fold of shown) this.grid.append(this.band(fold, width - lanes.of.get(fold.id)));
    const covered = new Set();
    for (const fold of shown) {
      if (fold.superseded_by || fold.placement !== "in_place") continue;
      for (let seq = fold.start; seq <= Math.min(fold.end, this.lastSeq); seq++) covered.add(seq);
    }
    for (const [seq, card] of this.cards) card.classList.toggle("covered", covered.has(seq));
  }

  band(fold, column) {
    const end = Math.min(fold.end, this.lastSeq);
    const saved = savedTokens(fold);
    const classes = ["band", `kind-${String(fold.kind).replace(/[^a-z_]/g, "")}`];
    if (fold.superseded_by) classes.push("superseded");
    if (fold.placement === "facts") classes.push("facts");
    if (end < fold.end) classes.push("continues");
    if (fold.id === this.flashed) classes.push("flash");
    const title =
      `${fold.kind} by ${fold.strategy}, messages #${fold.start}–#${fold.end}: ` +
      `${count(fold.log_tokens)} tokens in the log, ${count(fold.tokens_after)} in the fold` +
      (fold.superseded_by ? " (superseded)" : "");
    // A div spans the rows; the label inside is the button, sticky while its band scrolls by.
    return el(
      "div",
      {
        class: classes.join(" "),
        style: { gridRow: `${fold.start} / ${end + 1}`, gridColumn: String(column) },
        dataset: {
          id: fold.id,
          start: fold.start,
          end: fold.end,
          kind: fold.kind,
          strategy: fold.strategy,
          saved,
          superseded: fold.superseded_by ? "true" : "false",
        },
      },
      el(
        "button",
        { type: "button", class: "band-label", title, onclick: () => this.onFold(fold) },
        el("b", {}, fold.kind),
        el("span", {}, fold.strategy),
        el("span", { class: "saved" }, savedText(saved)),
        el("span", { class: "range" }, `#${fold.start}–#${fold.end}`),
      ),
    );
  }
}

// What a fold saved is measured against the log range it covers (the API's
// log_tokens), never against an older fold it superseded.
export function savedTokens(fold) {
  return fold.log_tokens - fold.tokens_after;
}

export function savedText(saved) {
  return saved >= 0 ? `${count(saved)} tokens saved` : `${count(-saved)} tokens added`;
}

// Active folds first, so they keep the lane next to the log; a fold takes the
// first lane where it overlaps nothing.
function assignLanes(folds) {
  const order = [...folds].sort(
    (a, b) =>
      Number(Boolean(a.superseded_by)) - Number(Boolean(b.superseded_by)) ||
      Number(a.placement === "facts") - Number(b.placement === "facts") ||
      a.start - b.start ||
      b.end - a.end,
  );
  const lanes = [];
  const of = new Map();
  for (const fold of order) {
    let lane = lanes.findIndex((taken) => taken.every((o) => o.end < fold.start || fold.end < o.start));
    if (lane < 0) {
      lane = lanes.length;
      lanes.push([]);
    }
    lanes[lane].push(fold);
    of.set(fold.id, lane);
  }
  return { count: lanes.length, of };
}
