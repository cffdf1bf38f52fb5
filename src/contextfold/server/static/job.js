// A view's background compaction job, as GET .../views/{name} reports it: nothing
// when the view is idle; else its state, since when, failures in a row, the
// worker running it and, for a parked view, why it failed.
import { count, el, timeNode } from "./api.js";

const STATES = {
  pending: "Compaction pending: waiting for a worker",
  running: "Compaction running",
  failing: "Compaction failing: tried again after a pause",
  parked: "Compaction parked: failed too often, nothing is queued until the view changes or is compacted",
};

export class JobLine {
  constructor() {
    this.job = null;
    this.node = el("p", { id: "job", class: "job", role: "status", hidden: true });
  }

  draw(job) {
    this.job = job || null;
    this.node.hidden = !job;
    this.node.dataset.state = job ? job.state : "";
    if (!job) {
      this.node.replaceChildren();
      return;
    }
    const parts = [el("b", { class: "job-state" }, STATES[job.state] || job.state)];
    if (job.since) parts.push(" · since ", timeNode(job.since));
    if (job.failures) parts.push(` · ${count(job.failures)} failure${job.failures === 1 ? "" : "s"} in a row`);
    if (job.worker) parts.push(" · worker ", el("code", { class: "job-worker" }, job.worker));
    if (job.reason) parts.push(el("span", { class: "job-reason" }, job.reason));
    this.node.replaceChildren(...parts);
  }
}
