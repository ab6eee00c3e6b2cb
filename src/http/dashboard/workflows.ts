/**
 * The dashboard's workflow views (docs/workflows.md), from the admin API's workflow routes:
 *
 * - `#/workflows?status=..&workflow=..` (`GET /api/workflows`): executions newest first with
 *   their workflow, id, where each stands (runnable, running and where, suspended on which
 *   deferreds, children and clocks, complete, failed, interrupted), runs, activities, created,
 *   updated and completed; filtered by status and workflow name, the filter being the URL; each links
 *   to its page;
 * - `#/workflow/<workflow>/<executionId>` (`GET /api/workflows/:workflow/:executionId`): one
 *   execution's standing, parent, payload and last result, every recorded activity attempt with
 *   its result or error, its deferreds (done, or waited on) and its clocks (due when, fired).
 */

/** The statuses the list filters by (the API's `status`). */
const statuses = ["runnable", "running", "suspended", "complete"]

/** The views' style: a standing wraps at words, never inside one. */
export const workflowsStyle = `
td.standing { white-space: normal; min-width: 16em; max-width: 40em; }
`

/** The views' markup. */
export const workflowsMarkup = `<section id="view-workflows" data-view="workflows" hidden>
<h2>Workflow executions</h2>
<form id="workflows-form" class="filter">
  <label>status <select name="status"><option value="">any</option>${statuses.map((s) => `<option>${s}</option>`).join("")}</select></label>
  <label>workflow <input name="workflow" size="20"></label>
  <button type="submit" data-action="filter">filter</button>
</form>
<table>
  <thead><tr><th>workflow</th><th>execution</th><th>status</th><th class="num">runs</th><th class="num">activities</th><th>created</th><th>updated</th><th>completed</th></tr></thead>
  <tbody id="workflow-rows"></tbody>
</table>
</section>
<section id="view-workflow" data-view="workflow" hidden>
<h2>Execution <span id="workflow-title"></span></h2>
<table><tbody id="workflow-facts"></tbody></table>
<h3>Payload</h3>
<pre id="workflow-payload"></pre>
<h3>Result</h3>
<pre id="workflow-result"></pre>
<h3>Activity attempts</h3>
<table>
  <thead><tr><th>activity</th><th class="num">attempt</th><th>outcome</th><th>result or error</th><th>recorded</th></tr></thead>
  <tbody id="workflow-activities"></tbody>
</table>
<h3>Deferreds</h3>
<table>
  <thead><tr><th>deferred</th><th>state</th><th>exit</th><th>done</th></tr></thead>
  <tbody id="workflow-deferreds"></tbody>
</table>
<h3>Clocks</h3>
<table>
  <thead><tr><th>clock</th><th>due</th><th>fired</th></tr></thead>
  <tbody id="workflow-clocks"></tbody>
</table>
</section>`

/** The views' functions, in the page's script. */
export const workflowsScript = `
const clockName = (name) => name.replace(/^DurableClock\\//, "");

/** Where an execution stands, in words: what a suspended one waits on, how a complete one ended. */
const standing = (e) => {
  if (e.status === "complete") return e.outcome === "success" ? "complete" : e.outcome === "failure" ? "failed" : e.outcome === "interrupted" ? "interrupted" : "failed (defect)";
  if (e.status === "running") return "running" + (e.holder ? " on " + e.holder : "");
  if (e.status === "runnable") return "runnable (waiting for a runner" + (e.nextRunAt ? ", from " + iso(e.nextRunAt) : "") + ")";
  if (e.status !== "suspended") return e.status;
  if (e.failed) return "suspended on its failure (a resume retries it)";
  const on = e.suspendedOn || { deferreds: [], children: [] };
  const clocks = e.clocks || [];
  const what = [
    ...on.deferreds.filter((d) => !clocks.some((c) => c.name === d)).map((d) => "deferred " + d),
    ...on.children.map((c) => "child " + c),
    ...clocks.map((c) => "clock " + clockName(c.name) + " due " + iso(c.dueAt))
  ];
  return what.length === 0 ? "suspended" : "suspended on " + what.join(", ");
};

/** The link to an execution's page. */
const executionHash = (workflow, executionId) => "/workflow/" + encodeURIComponent(workflow) + "/" + encodeURIComponent(executionId);

const executionRow = (e) => {
  const tr = fieldRow([
    ["workflow", viewLink("/workflows" + queryOf({ workflow: e.workflow }), e.workflow)],
    ["executionId", viewLink(executionHash(e.workflow, e.executionId), e.executionId)],
    ["status", standing(e), "standing"], ["runs", e.runs, "num"], ["activities", e.activities, "num"],
    ["createdAt", iso(e.createdAt)], ["updatedAt", iso(e.updatedAt)], ["completedAt", iso(e.completedAt)]
  ]);
  tr.dataset.execution = e.executionId;
  if (e.status === "complete" && e.outcome !== "success") tr.querySelector('[data-field="status"]').className = "standing bad";
  return tr;
};

/** A stored exit as text: its value, or the reasons of its cause. */
const exitText = (exit) => {
  if (exit === null || exit === undefined) return "-";
  if (exit._tag === "Success") return "result: " + pretty(exit.value === undefined ? null : exit.value);
  const reasons = Array.isArray(exit.cause) ? exit.cause : [];
  return "error: " + reasons.map((r) => r._tag === "Fail" ? pretty(r.error) : r._tag === "Die" ? "defect " + pretty(r.defect) : r._tag === "Interrupt" ? "interrupted" : pretty(r)).join("; ");
};

const executionFacts = (e) => [
  ["workflow", "workflow", viewLink("/workflows" + queryOf({ workflow: e.workflow }), e.workflow)],
  ["status", "status", standing(e)],
  ["held", "lease", e.held ? "held" + (e.holder ? " by " + e.holder : "") : "none"],
  ["parent", "parent", e.parent === null ? "-" : viewLink("/workflow/" + e.parent.split("/").map(encodeURIComponent).join("/"), e.parent)],
  ["runs", "runs", e.runs],
  ["interrupt", "interrupt asked", e.interrupt === 0 ? "no" : e.interrupt === 1 ? "yes" : "yes (unsafe)"],
  ["nextRunAt", "next run", iso(e.nextRunAt)],
  ["createdAt", "created", iso(e.createdAt)],
  ["updatedAt", "updated", iso(e.updatedAt)],
  ["completedAt", "completed", iso(e.completedAt)]
];

/** The deferreds of an execution: the done ones, then those it is suspended on and that are not done. */
const deferredRows = (detail) => {
  const done = detail.deferreds.map((d) => {
    const tr = fieldRow([["name", d.name], ["state", "done"], ["exit", exitText(d.exit), "text"], ["doneAt", iso(d.doneAt)]]);
    tr.dataset.deferred = d.name;
    return tr;
  });
  const on = detail.execution.status === "suspended" && detail.execution.suspendedOn ? detail.execution.suspendedOn.deferreds : [];
  const waiting = on.filter((name) => !detail.deferreds.some((d) => d.name === name)).map((name) => {
    const tr = fieldRow([["name", name], ["state", "waiting"], ["exit", "-"], ["doneAt", "-"]]);
    tr.dataset.deferred = name;
    return tr;
  });
  return [...done, ...waiting];
};

views.workflows = {
  title: "workflows",
  enter: (params) => {
    const form = $("workflows-form");
    form.elements.status.value = params.get("status") || "";
    form.elements.workflow.value = params.get("workflow") || "";
  },
  refresh: async (params) => {
    const rows = await getJson("api/workflows" + queryOf({ status: params.get("status"), workflow: params.get("workflow") }));
    fill("workflow-rows", rows.map(executionRow), 8, "no workflow executions" + (params.toString() === "" ? "" : " match"));
  }
};

$("workflows-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const form = event.target;
  location.hash = "#/workflows" + queryOf({ status: form.elements.status.value, workflow: form.elements.workflow.value.trim() });
});

views.workflow = {
  title: "workflow execution",
  enter: (params, id, path) => {
    $("workflow-title").textContent = path.join(" / ");
  },
  refresh: async (params, id, path) => {
    const [workflow, executionId] = path;
    let detail;
    try {
      detail = await getJson("api/workflows/" + encodeURIComponent(workflow || "") + "/" + encodeURIComponent(executionId || ""));
    } catch (error) {
      if (error.status !== 404 && error.status !== 400) throw error;
      fill("workflow-facts", [], 2, "no execution " + (executionId || "") + " of workflow " + (workflow || "") + " (never started, or pruned)");
      for (const id of ["workflow-payload", "workflow-result"]) $(id).textContent = "";
      for (const id of ["workflow-activities", "workflow-deferreds", "workflow-clocks"]) fill(id, [], 1, "-");
      return;
    }
    const e = detail.execution;
    fill("workflow-facts", factRows(executionFacts(e)), 2, "");
    $("workflow-payload").textContent = pretty(e.payload);
    $("workflow-result").textContent = e.result === null ? "none yet" : e.result._tag === "Complete" ? exitText(e.result.exit) : pretty(e.result);
    fill("workflow-activities", detail.activities.map((a) => {
      const tr = fieldRow([["activity", a.activity], ["attempt", a.attempt, "num"], ["outcome", a.outcome], ["detail", exitText(a.exit), "text"], ["recordedAt", iso(a.recordedAt)]]);
      tr.dataset.activity = a.activity + "/" + a.attempt;
      return tr;
    }), 5, "no activity recorded");
    fill("workflow-deferreds", deferredRows(detail), 4, "no deferred");
    fill("workflow-clocks", detail.clocks.map((c) => fieldRow([["name", clockName(c.name)], ["dueAt", iso(c.dueAt)], ["fired", c.fired ? "yes" : "not yet"]])), 3, "no clock");
  }
};
`
