/**
 * The dashboard's flow-control panel (docs/flow-control.md), what `leasehold flow <queue>`
 * prints: for each queue with stored limits (`GET /api/limits`, at most
 * {@link flowQueueCap} of them), its limits (the queue's own, then one row per task), how many
 * of its messages are in flight, the keys at their concurrency limit, the FIFO keys blocked by
 * a waiting head and the full rate windows with the wait they cause (`GET
 * /api/queues/:queue/flow`). Pieces of `dashboard.ts`'s page: its style, its markup and
 * the functions its refresh calls (`readFlow`, `showFlow`), which use the page's `$`, `cell`,
 * `age`, `iso`, `orDash`, `fieldRow` and `getJson` (`dashboard/common.ts`). Every value from the server goes in as text.
 */

/** How many queues with limits the panel shows (each asks its flow status on every refresh). */
export const flowQueueCap = 50

/** The panel's style, added to the page's. */
export const flowStyle = `
h3 { font-size: 14px; margin: 14px 0 4px; }
section.flow { margin-bottom: 12px; }
section.flow table { width: auto; min-width: 36em; margin-bottom: 6px; }
section.flow p { margin: 4px 0; }
caption { text-align: left; color: var(--muted); padding: 4px 0 2px; }
`

/** The panel's place in the page. */
export const flowMarkup = `<h2>Flow control</h2>
<div id="flow"></div>`

/** The panel's functions, in the page's script (before its refresh). */
export const flowScript = `
const flowQueueCap = ${flowQueueCap};
/** How many rows each list of a flow status holds at most: a full one may have more. */
const flowListCap = 100;

/** A rate as FlowControl.formatRate writes it (and the CLI reads it): 100/1m. */
const formatRate = (rate) => {
  if (rate === null || rate === undefined) return "-";
  for (const [unit, ms] of [["d", 86400000], ["h", 3600000], ["m", 60000], ["s", 1000]]) {
    if (rate.periodMs % ms === 0) return rate.count + "/" + rate.periodMs / ms + unit;
  }
  return rate.count + "/" + rate.periodMs + "ms";
};

/** When \`at\` (ISO) is, seen from \`now\`: "in 1m 30s", or "now" once it is past. */
const due = (at, now) => {
  const left = Date.parse(at) - now;
  return left <= 0 ? "now" : "in " + age(left);
};

/** A line of the panel in the style of a note. */
const flowNote = (text) => {
  const p = document.createElement("p");
  p.className = "empty";
  p.textContent = text;
  return p;
};

/** A table (data-flow=kind) titled \`title\`: \`columns\` are [label, class] pairs; a line saying \`none\` when there are no rows. */
const flowTable = (kind, title, columns, rows, none) => {
  if (rows.length === 0) {
    const p = flowNote(title + ": " + none);
    p.dataset.flow = kind;
    return p;
  }
  const table = document.createElement("table");
  table.dataset.flow = kind;
  table.createCaption().textContent = title + (rows.length >= flowListCap ? " (the first " + flowListCap + ")" : "");
  const head = table.createTHead().insertRow();
  for (const [label, cls] of columns) {
    const th = document.createElement("th");
    th.textContent = label;
    if (cls) th.className = cls;
    head.appendChild(th);
  }
  table.createTBody().append(...rows);
  return table;
};

const limitsRow = (l) => fieldRow([
  ["task", l.task === null ? "(whole queue)" : l.task],
  ["concurrency", orDash(l.limits.concurrency), "num"],
  ["rate", formatRate(l.limits.rate), "num"],
  ["keyConcurrency", orDash(l.limits.keyConcurrency), "num"],
  ["keyRate", formatRate(l.limits.keyRate), "num"],
  ["fifo", l.limits.fifo ? "yes" : "-"],
  ["fair", l.limits.fair ? "yes" : "-"],
  ["source", l.source],
  ["updated", iso(l.updatedAt)]
]);

const blockedRow = (b, now) => fieldRow([
  ["key", b.key, "text"], ["headId", b.headId, "num"], ["attempts", b.attempts, "num"],
  ["dueAt", iso(b.visibleAt)], ["due", due(b.visibleAt, now), "num"], ["lastError", orDash(b.lastError), "text"]
]);

const throttleRow = (t, now) => fieldRow([
  ["task", orDash(t.task)], ["key", orDash(t.key), "text"], ["nextAt", iso(t.nextAt)], ["wait", due(t.nextAt, now), "num"]
]);

/** The key concurrency the queue's own limits set (FIFO: one at a time), for a title. */
const keyLimitOf = (status) => {
  const own = status.limits.find((l) => l.task === null);
  if (own === undefined) return "";
  const each = own.limits.fifo ? 1 : own.limits.keyConcurrency;
  return each === undefined ? "" : " (" + each + " in flight each)";
};

/** One queue's part of the panel (data-flow-queue), as \`leasehold flow <queue>\` prints it. */
const flowBlock = (status, now) => {
  const section = document.createElement("section");
  section.className = "flow";
  section.dataset.flowQueue = status.queue;
  const title = document.createElement("h3");
  const inFlight = document.createElement("span");
  inFlight.dataset.field = "inFlight";
  inFlight.textContent = String(status.inFlight);
  title.append(document.createTextNode(status.queue + ": "), inFlight, document.createTextNode(" in flight"));
  section.append(
    title,
    flowTable("limits", "limits", [["task"], ["concurrency", "num"], ["rate", "num"], ["key concurrency", "num"], ["key rate", "num"],
      ["FIFO"], ["fair"], ["source"], ["updated"]], status.limits.map(limitsRow), "none (claimed as fast as consumers ask)"),
    flowTable("keysAtLimit", "keys at their limit" + keyLimitOf(status), [["key"], ["in flight", "num"]],
      status.keysAtLimit.map((k) => fieldRow([["key", k.key, "text"], ["inFlight", k.inFlight, "num"]])), "none"),
    flowTable("blockedKeys", "FIFO keys blocked by a waiting head", [["key"], ["head id", "num"], ["attempts", "num"], ["due at"],
      ["due", "num"], ["last error"]], status.blockedKeys.map((b) => blockedRow(b, now)), "none"),
    flowTable("throttles", "full rate windows (no start until then)", [["task"], ["key"], ["next start at"], ["wait", "num"]],
      status.throttles.map((t) => throttleRow(t, now)), "none")
  );
  return section;
};

/** The stored limits' queues (in their order) and the flow status of the first flowQueueCap of them. */
const readFlow = async () => {
  const queues = [...new Set((await getJson("api/limits")).map((l) => l.queue))];
  const statuses = await Promise.all(queues.slice(0, flowQueueCap).map((q) => getJson("api/queues/" + encodeURIComponent(q) + "/flow")));
  return { total: queues.length, statuses };
};

/** Replace the panel with what readFlow read: one block per queue, a note when it shows fewer than there are, or none. */
const showFlow = (flow, now) => {
  const box = $("flow");
  box.replaceChildren();
  if (flow.total === 0) {
    box.appendChild(flowNote("No flow limits set: every queue is claimed as fast as its consumers ask."));
    return;
  }
  if (flow.total > flow.statuses.length) {
    box.appendChild(flowNote("showing the first " + flow.statuses.length + " of " + flow.total + " queues with limits (leasehold flow <queue> shows any)"));
  }
  for (const status of flow.statuses) box.appendChild(flowBlock(status, now));
};
`
