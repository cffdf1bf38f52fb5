// One session: the log on one side, a view's prompt on the other, a view picker,
// a branch picker (when a regenerate or an edit made branches), a budget slider
// bounded by the view's floor, superseded folds on demand, the view's background
// job, and live updates from the event stream.
import { ApiError, api, count, debounce, el, errorNode, isoTime, setCrumbs, storedKey, timeNode } from "./api.js";
import { History, savedText, savedTokens } from "./history.js";
import { JobLine } from "./job.js";
import { Prompt } from "./prompt.js";

const DEFAULT_BUDGET = 8000;
const JOB_POLL_MS = 5000; // a shown job is read again this often (states without an event, its age)

export async function showSession(root, sid) {
  const base = `/api/v1/sessions/${encodeURIComponent(sid)}`;
  const params = new URLSearchParams(location.search);
  setCrumbs(el("a", { href: "/" }, "Sessions"), el("span", { class: "sep" }, "/"), el("span", { class: "crumb-id" }, sid));

  let info;
  let views;
  let branches;
  try {
    [info, views, branches] = await Promise.all([api(base), api(base + "/views"), api(base + "/branches")]);
  } catch (error) {
    const text = error instanceof ApiError && error.status === 404 ? `No session “${sid}” here.` : error;
    root.replaceChildren(el("section", { class: "list-page" }, errorNode(text instanceof Error ? text : { message: text })));
    return;
  }

  const state = {
    views: views.views,
    view: null,
    budget: null,
    folds: [],
    superseded: false,
    branches: branches.branches,
    branch: null, // null: the newest branch's prompt, and every branch's messages in the log
  };
  const logPane = new History(sid, showFold);
  const prompt = new Prompt(sid, (fold) => logPane.reveal(fold), budgetRose);
  const jobLine = new JobLine();
  prompt.report.before(jobLine.node);

  const stats = el("p", { id: "session-stats", class: "muted small" });
  const live = el("span", { id: "live", class: "live", dataset: { state: "connecting" } }, "connecting…");
  const notice = el("p", { id: "notice", class: "notice", hidden: true });
  const picker = el("select", { id: "view-picker", "aria-label": "View" });
  const slider = el("input", { type: "range", id: "budget", min: 1, step: 1, "aria-label": "Budget (tokens)" });
  const budgetOut = el("output", { id: "budget-value", for: "budget" });
  const floorOut = el("span", {
    id: "budget-floor",
    class: "muted small",
    title: "The system prompt and the latest user message are never left out: the budget must hold them.",
  });
  const toggle = el("input", { type: "checkbox", id: "show-superseded" });
  const branchPicker = el("select", { id: "branch-picker", "aria-label": "Branch" });
  const branchLabel = el("label", { id: "branch-label" }, "Branch ", branchPicker);

  // Branches come from a regenerated answer or an edited message; each is named by its
  // last message. The first choice follows the newest branch and shows the whole log.
  function drawBranches() {
    const known = state.branches.some((b) => String(b.head) === String(state.branch));
    if (!known) state.branch = null;
    branchLabel.hidden = state.branches.length < 2;
    const newest = state.branches[0];
    const options = [el("option", { value: "" }, newest ? `Newest (ends at #${newest.head}), whole log` : "Newest")];
    for (const branch of state.branches) {
      const parts = branch.fork === null ? "" : branch.fork ? `, parts after #${branch.fork}` : ", a new start";
      options.push(
        el("option", { value: String(branch.head) }, `Ends at #${branch.head}: ${count(branch.length)} messages${parts}`),
      );
    }
    branchPicker.replaceChildren(...options);
    branchPicker.value = state.branch === null ? "" : String(state.branch);
  }

  async function selectBranch(value) {
    state.branch = value ? Number(value) : null;
    remember();
    await logPane.setBranch(state.branch);
    await loadFolds();
    await renderPrompt();
  }

  function drawStats() {
    stats.replaceChildren(
      `${count(info.messages)} messages in the log · ${count(info.tokens)} tokens (counted with ${info.encoding}) · created `,
      el("time", { title: isoTime(info.created_at) }, isoTime(info.created_at)),
      " · last activity ",
      timeNode(info.last_at),
    );
  }

  function viewRecord() {
    return state.views.find((view) => view.name === state.view) || null;
  }

  // The slider starts at the view's floor, the smallest budget it renders at: below
  // it render refuses, since the system prompt and the latest user message must fit.
  function setSliderRange() {
    const record = viewRecord();
    const configured = (record && record.config && record.config.budget) || DEFAULT_BUDGET;
    const floor = Math.max(1, (record && record.floor) || 1);
    const top = Math.max(2 * configured, Math.ceil((info.tokens * 1.1) / 1000) * 1000, 1000, floor);
    slider.min = String(floor);
    slider.max = String(top);
    if (state.budget === null) state.budget = configured;
    state.budget = Math.min(Math.max(state.budget, floor), top);
    slider.value = String(state.budget);
    budgetOut.textContent = `${count(state.budget)} tokens`;
    floorOut.textContent = record ? `at least ${count(floor)}` : "";
  }

  // Bound the slider again after the floor moved; say so when that moved the budget.
  function rebound() {
    const before = state.budget;
    setSliderRange();
    if (state.budget === before) return false;
    remember();
    say(
      `The budget is now ${count(state.budget)} tokens, the smallest this view takes: ` +
        "its system prompt and latest user message must fit whole.",
    );
    return true;
  }

  // Render refused the budget (the floor rose before the page knew): read the floor
  // again and render at it; false when the floor did not move, and the error stands.
  async function budgetRose() {
    await refreshView();
    if (!rebound()) return false;
    await renderPrompt();
    return true;
  }

  function remember() {
    const search = new URLSearchParams();
    if (state.view) search.set("view", state.view);
    if (state.budget) search.set("budget", String(state.budget));
    if (state.branch !== null) search.set("branch", String(state.branch));
    replaceQuery(search);
  }

  async function loadFolds() {
    if (!state.view) return;
    const branch = state.branch === null ? "" : `&branch=${state.branch}`;
    const path = `${base}/views/${encodeURIComponent(state.view)}/folds?superseded=${state.superseded}${branch}`;
    const data = await api(path);
    state.folds = data.folds;
    logPane.setFolds(state.folds);
  }

  async function renderPrompt() {
    if (!state.view) {
      prompt.empty(`This session has no view yet, so there is no prompt to show: create one with PUT ${base}/views/NAME (a preset and a budget).`);
      return;
    }
    await prompt.render(state.view, state.budget, state.folds, state.branch);
  }

  function drawJob() {
    const record = viewRecord();
    jobLine.draw(record ? record.job : null);
  }

  // The view's record again, for its job and floor (appends and the workers' events change them).
  async function refreshView() {
    const name = state.view;
    if (!name) return;
    const record = await api(`${base}/views/${encodeURIComponent(name)}`);
    state.views = state.views.map((view) => (view.name === record.name ? record : view));
    if (name === state.view) drawJob();
  }

  async function selectView(name) {
    state.view = name;
    state.budget = null; // each view renders at its own budget until the slider moves
    setSliderRange();
    drawJob();
    remember();
    await loadFolds();
    await renderPrompt();
  }

  function drawPicker() {
    picker.replaceChildren(...state.views.map((view) => el("option", { value: view.name }, view.name)));
    picker.disabled = state.views.length === 0;
    if (state.view) picker.value = state.view;
  }

  function showFold(fold) {
    const facts = document.getElementById("fold-facts");
    const span = fold.end - fold.start + 1;
    const rows = [
      ["log range", `messages #${fold.start}–#${fold.end} (${count(span)} message${span === 1 ? "" : "s"})`],
      ["kind", fold.kind],
      ["strategy", fold.strategy],
      ["model", fold.model || "none (no model call)"],
      ["shown", fold.placement === "facts" ? "once, after the system prompt (facts)" : "in place of its log range"],
      ["tokens in the log", count(fold.log_tokens)],
      ["tokens in the fold", count(fold.tokens_after)],
      ["saved", savedText(savedTokens(fold))],
      ["created", isoTime(fold.created_at)],
      ["superseded by", fold.superseded_by || "nothing: the fold is in use"],
    ];
    facts.replaceChildren(...rows.flatMap(([name, value]) => [el("dt", {}, name), el("dd", {}, value)]));
    document.getElementById("fold-title").textContent = `Fold ${fold.id}`;
    document.getElementById("fold-text").textContent = fold.text;
    document.getElementById("fold-dialog").showModal();
  }

  function say(text) {
    notice.hidden = !text;
    notice.textContent = text || "";
  }

  // An event handler's failure is shown, not lost in the console.
  function guarded(handler) {
    return (event) => handler(event).catch((error) => say(String(error.message || error)));
  }

  const rerender = debounce(() => {
    renderPrompt().catch((error) => say(String(error.message || error)));
  }, 150);
  const rejob = debounce(() => {
    refreshView().catch((error) => say(String(error.message || error)));
  }, 300);

  picker.addEventListener("change", guarded(() => selectView(picker.value)));
  branchPicker.addEventListener("change", guarded(() => selectBranch(branchPicker.value)));
  slider.addEventListener("input", () => {
    state.budget = Number(slider.value);
    budgetOut.textContent = `${count(state.budget)} tokens`;
    remember();
    rerender();
  });
  toggle.addEventListener(
    "change",
    guarded(async () => {
      state.superseded = toggle.checked;
      await loadFolds();
    }),
  );

  const wanted = params.get("view");
  state.view = state.views.some((v) => v.name === wanted)
    ? wanted
    : state.views.some((v) => v.name === "default")
      ? "default"
      : (state.views[0] || {}).name || null;
  state.budget = Number(params.get("budget")) || null;
  state.branch = params.get("branch") ? Number(params.get("branch")) : null;
  drawStats();
  drawPicker();
  drawBranches();
  setSliderRange();
  drawJob();

  root.replaceChildren(
    el(
      "section",
      { class: "session-page" },
      el("div", { class: "session-head-row" }, el("h1", { class: "session-title" }, sid), live),
      stats,
      el(
        "div",
        { class: "toolbar controls" },
        el("label", {}, "View ", picker),
        branchLabel,
        el("label", { class: "budget" }, "Budget ", slider, budgetOut, floorOut),
        el("label", { class: "check" }, toggle, " Show superseded folds"),
      ),
      notice,
      el(
        "nav",
        { class: "jump", "aria-label": "Sections" },
        el("a", { href: "#history" }, "Log"),
        el("a", { href: "#prompt-section" }, "Prompt"),
      ),
      el("div", { class: "columns" }, logPane.node, prompt.node),
    ),
  );

  logPane.setTotal(info.last_seq);
  logPane.branch = state.branch;
  await guarded(async () => {
    await logPane.loadMore();
    await loadFolds();
    await renderPrompt();
  })();
  listen();
  setInterval(() => {
    if (jobLine.job && document.visibilityState === "visible") rejob();
  }, JOB_POLL_MS);

  // Server-sent events: appends bring the new messages, fold changes redraw bands and prompt.
  function listen() {
    const key = storedKey();
    const source = new EventSource(`${base}/events` + (key ? `?api_key=${encodeURIComponent(key)}` : ""));
    source.addEventListener("open", () => {
      live.dataset.state = "live";
      live.textContent = "live";
    });
    source.addEventListener("error", () => {
      const closed = source.readyState === EventSource.CLOSED;
      live.dataset.state = closed ? "off" : "connecting";
      live.textContent = closed ? "live updates off" : "reconnecting…";
    });
    source.addEventListener(
      "appended",
      guarded(async () => {
        info = await api(base);
        await refreshView(); // a new user message moves the floor
        state.branches = (await api(base + "/branches")).branches;
        drawBranches();
        drawStats();
        rebound();
        logPane.setTotal(info.last_seq);
        await logPane.catchUp();
        rerender();
      }),
    );
    source.addEventListener("planned", (event) => {
      if (viewOf(event) !== state.view) return;
      say("Compaction planned…");
      rejob();
    });
    source.addEventListener(
      "committed",
      guarded(async (event) => {
        const name = viewOf(event);
        if (name && !state.views.some((v) => v.name === name)) {
          state.views = (await api(base + "/views")).views;
          drawPicker();
          if (!state.view) await selectView(name);
        }
        if (name !== state.view) return;
        say("");
        await loadFolds();
        rerender();
        rejob();
      }),
    );
    source.addEventListener("provisional", (event) => {
      if (viewOf(event) !== state.view) return;
      const data = JSON.parse(event.data);
      say(`A provisional fold stands for #${data.start}–#${data.end} until the view's fold lands`);
    });
    source.addEventListener(
      "replaced",
      guarded(async (event) => {
        if (viewOf(event) !== state.view) return;
        const data = JSON.parse(event.data);
        say(`The view's fold replaced the provisional fold of #${data.start}–#${data.end} after ${data.duration_s.toFixed(1)} s`);
        await loadFolds();
        rerender();
      }),
    );
    for (const [kind, text] of Object.entries(TROUBLE)) {
      source.addEventListener(
        kind,
        guarded(async (event) => {
          if (viewOf(event) !== state.view) return;
          const why = String(detail(event));
          say(`${text}. ${why.charAt(0).toUpperCase()}${why.slice(1)}`);
          rejob();
          if (kind !== "quarantined") return;
          await loadFolds(); // the set-aside fold's band goes, its range renders from the log
          rerender();
        }),
      );
    }
  }
}

// What each compaction trouble the event stream reports means for the view.
const TROUBLE = {
  failed: "Compaction failed and the job was dropped",
  degraded: "Compaction failed; the view keeps its older folds and may be over its budget until a later try",
  quarantined: "A damaged fold was set aside; the view renders its log range instead",
  retried: "Compaction failed and is tried again after a pause",
  parked: "Compaction failed too often; nothing is queued until the view changes or is compacted",
};

function viewOf(event) {
  try {
    return JSON.parse(event.data).view || null;
  } catch {
    return null;
  }
}

function detail(event) {
  try {
    const data = JSON.parse(event.data);
    return data.detail || data.error || data.reason || data.message || event.data;
  } catch {
    return event.data;
  }
}

function replaceQuery(search) {
  const text = search.toString();
  window.history.replaceState(null, "", location.pathname + (text ? "?" + text : ""));
}
