/**
 * The dashboard page served at `/` next to the admin API: one self-contained
 * HTML document (inline CSS and script, no framework, no CDN, works offline)
 * that reads the `/api` routes every 2 s. Every value from the server is put in
 * the page as text (`textContent`), never as HTML. Every request (reads and the
 * buttons that change something) sends the token typed into the token field
 * (kept in sessionStorage) as `Authorization: Bearer <token>`. The page itself
 * holds no data, so it is served without a token; it runs under a
 * Content-Security-Policy that admits only its own inline script and style (by
 * hash: see `Http`), so it sets no inline event handler or style attribute.
 * The flow-control panel is `dashboardFlow.ts`.
 */
import { flowMarkup, flowScript, flowStyle } from "./dashboardFlow.ts"

const style = `
:root { color-scheme: light dark; --line: #8884; --muted: #888; --bad: #c33; --ok: #2a7; }
* { box-sizing: border-box; }
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; padding: 16px 24px; }
header { display: flex; flex-wrap: wrap; gap: 12px; align-items: center; margin-bottom: 8px; }
h1 { font-size: 20px; margin: 0 12px 0 0; }
h2 { font-size: 15px; margin: 20px 0 6px; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td.text { white-space: normal; max-width: 40em; overflow-wrap: anywhere; }
tr.paused td { color: var(--muted); }
.empty { color: var(--muted); font-style: italic; }
#status { color: var(--muted); }
#status.error, #notice.error { color: var(--bad); }
#notice { min-height: 1.4em; }
#notice.ok { color: var(--ok); }
button { font: inherit; padding: 1px 8px; margin-right: 4px; cursor: pointer; }
.counters { display: flex; flex-wrap: wrap; gap: 8px 24px; }
.counters div { min-width: 9em; }
.counters b { display: block; font-size: 18px; font-variant-numeric: tabular-nums; }
${flowStyle}`

const script = `
"use strict";
const $ = (id) => document.getElementById(id);
const tokenField = $("token");
tokenField.value = sessionStorage.getItem("leasehold-token") || "";
tokenField.addEventListener("input", () => {
  sessionStorage.setItem("leasehold-token", tokenField.value);
  refresh();
});

/** The token as a request header, when one is typed. */
const authorization = () => tokenField.value === "" ? {} : { authorization: "Bearer " + tokenField.value };

const age = (ms) => {
  if (ms === null || ms === undefined || !(ms > 0)) return "-";
  if (ms < 1000) return Math.round(ms) + "ms";
  const s = Math.floor(ms / 1000);
  if (s < 60) return s + "s";
  const m = Math.floor(s / 60);
  if (m < 60) return m + "m " + (s % 60) + "s";
  const h = Math.floor(m / 60);
  return h < 48 ? h + "h " + (m % 60) + "m" : Math.floor(h / 24) + "d " + (h % 24) + "h";
};

const cell = (text, cls) => {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "" : String(text);
  if (cls) td.className = cls;
  return td;
};

const button = (label, action) => {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  b.dataset.action = label;
  b.addEventListener("click", action);
  return b;
};

/** Replace the rows of table body \`id\` with \`rows\` (each a <tr>), or a note when there are none. */
const fill = (id, rows, columns, none) => {
  const body = $(id);
  body.replaceChildren();
  if (rows.length === 0) {
    const tr = document.createElement("tr");
    const td = cell(none, "empty");
    td.colSpan = columns;
    tr.appendChild(td);
    body.appendChild(tr);
    return;
  }
  for (const row of rows) body.appendChild(row);
};

const notice = (text, ok) => {
  const n = $("notice");
  n.textContent = text;
  n.className = ok ? "ok" : "error";
};

/** POST a changing route with the bearer token; report the server's answer, then refresh. */
const change = async (path, body, what) => {
  try {
    const response = await fetch(path, {
      method: "POST",
      headers: { "content-type": "application/json", ...authorization() },
      body: JSON.stringify(body || {})
    });
    const answer = await response.json().catch(() => ({}));
    if (response.ok) notice(what + ": done", true);
    else notice(what + ": " + response.status + " " + (answer.message || response.statusText), false);
  } catch (error) {
    notice(what + ": " + error, false);
  }
  refresh();
};

const getJson = async (path) => {
  const response = await fetch(path, { headers: { accept: "application/json", ...authorization() } });
  if (!response.ok) {
    const answer = await response.json().catch(() => ({}));
    throw new Error(path + ": " + response.status + " " + (answer.message || response.statusText));
  }
  return response.json();
};

const queueRow = (q) => {
  const tr = document.createElement("tr");
  tr.dataset.queue = q.queue;
  if (q.paused) tr.className = "paused";
  tr.append(
    cell(q.queue),
    cell(q.ready, "num"), cell(q.delayed, "num"), cell(q.inFlight, "num"), cell(q.dead, "num"),
    cell(age(q.oldestReadyAgeMs), "num"),
    cell(q.paused ? "paused" : "no")
  );
  for (const td of tr.children) td.dataset.field = ["queue", "ready", "delayed", "inFlight", "dead", "oldestReady", "paused"][td.cellIndex];
  const actions = document.createElement("td");
  const verb = q.paused ? "resume" : "pause";
  actions.appendChild(button(verb, () => change("/api/queues/" + encodeURIComponent(q.queue) + "/" + verb, {}, verb + " " + q.queue)));
  tr.appendChild(actions);
  return tr;
};

const consumerRow = (c) => {
  const tr = document.createElement("tr");
  tr.dataset.consumer = c.id;
  tr.append(cell(c.id), cell(c.host), cell(c.pid, "num"), cell(age(c.heartbeatAgeMs), "num"), cell(c.inFlight, "num"),
    cell(c.sessionLiveness ? "yes" : "lease expiry only"));
  return tr;
};

const flightRow = (m, now) => {
  const tr = document.createElement("tr");
  tr.dataset.message = m.id;
  const leasedAt = m.leasedAt ? Date.parse(m.leasedAt) : null;
  const leaseEnd = m.visibleAt ? Date.parse(m.visibleAt) : null;
  tr.append(cell(m.id, "num"), cell(m.queue), cell(m.task), cell(m.leasedBy), cell(m.attempts + " of " + m.maxAttempts, "num"),
    cell(leasedAt === null ? "-" : age(now - leasedAt), "num"), cell(leaseEnd === null ? "-" : age(leaseEnd - now), "num"));
  const actions = document.createElement("td");
  if (m.cancelRequestedAt) actions.textContent = "cancelling";
  else actions.appendChild(button("cancel", () => change("/api/messages/cancel", { ids: [m.id] }, "cancel " + m.id)));
  tr.appendChild(actions);
  return tr;
};

const deadRow = (d) => {
  const tr = document.createElement("tr");
  tr.dataset.message = d.id;
  tr.append(cell(d.id, "num"), cell(d.queue), cell(d.task), cell(d.attempts, "num"), cell(new Date(d.deadAt).toISOString()),
    cell(d.reason, "text"));
  const actions = document.createElement("td");
  actions.append(
    button("redrive", () => change("/api/dead-letters/redrive", { ids: [d.id] }, "redrive " + d.id)),
    button("purge", () => change("/api/dead-letters/purge", { ids: [d.id] }, "purge " + d.id))
  );
  tr.appendChild(actions);
  return tr;
};

const counter = (label, value, key) => {
  const div = document.createElement("div");
  const b = document.createElement("b");
  b.textContent = String(value);
  b.dataset.counter = key;
  div.append(b, document.createTextNode(label));
  return div;
};

${flowScript}
let refreshing = false;
let again = false;
async function refresh() {
  // One refresh at a time; one asked for meanwhile (the token changed) runs right after.
  if (refreshing) {
    again = true;
    return;
  }
  refreshing = true;
  try {
    const [queues, consumers, flight, dead, counters, flow] = await Promise.all([
      getJson("/api/queues"), getJson("/api/consumers"), getJson("/api/in-flight"),
      getJson("/api/dead-letters?limit=100"), getJson("/api/counters"), readFlow()
    ]);
    const now = Date.now();
    fill("queues", queues.map(queueRow), 8, "no queue has messages");
    fill("consumers", consumers.map(consumerRow), 6, "no consumer registered (session liveness off, or none running)");
    fill("in-flight", flight.map((m) => flightRow(m, now)), 8, "nothing in flight");
    fill("dead-letters", dead.map(deadRow), 7, "no dead letters");
    showFlow(flow, now);
    const box = $("counters");
    box.replaceChildren();
    const lost = Object.entries(counters.leasesLost);
    box.append(
      counter("double runs", counters.doubleRuns, "doubleRuns"),
      counter("claims reaped", counters.reaped, "reaped"),
      counter("wedged renewers", counters.wedgedRenewers, "wedgedRenewers"),
      counter("renewal failures", counters.renewalFailures, "renewalFailures"),
      counter("finish failures", counters.finishFailures, "finishFailures"),
      ...(lost.length === 0 ? [counter("leases lost", 0, "leasesLost")] : lost.map(([reason, n]) => counter("leases lost: " + reason, n, "leasesLost." + reason))),
      counter("claimed", counters.claimed, "claimed"),
      counter("acked", counters.acked, "acked"),
      counter("retried", counters.retried, "retried"),
      counter("dead-lettered", counters.deadLettered, "deadLettered"),
      counter("cancelled while running", counters.cancelled, "cancelled")
    );
    $("status").textContent = "updated " + new Date(now).toLocaleTimeString() + " (every 2 s)";
    $("status").className = "";
  } catch (error) {
    $("status").textContent = "refresh failed: " + (error && error.message ? error.message : error);
    $("status").className = "error";
  } finally {
    refreshing = false;
    if (again) {
      again = false;
      refresh();
    }
  }
}
refresh();
setInterval(refresh, 2000);
`

/** The whole page. */
export const html = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>leasehold</title>
<link rel="icon" href="data:,">
<style>${style}</style>
</head>
<body>
<header>
  <h1>leasehold</h1>
  <label>admin token <input id="token" type="password" autocomplete="off" size="28" placeholder="LEASEHOLD_ADMIN_TOKEN"></label>
  <span id="status">loading...</span>
  <a href="/docs">API reference</a>
</header>
<div id="notice"></div>
<h2>Queues</h2>
<table>
  <thead><tr><th>queue</th><th class="num">ready</th><th class="num">delayed</th><th class="num">in flight</th><th class="num">dead</th><th class="num">oldest ready</th><th>paused</th><th></th></tr></thead>
  <tbody id="queues"></tbody>
</table>
${flowMarkup}
<h2>Consumers</h2>
<table>
  <thead><tr><th>consumer</th><th>host</th><th class="num">pid</th><th class="num">heartbeat age</th><th class="num">in flight</th><th>session liveness</th></tr></thead>
  <tbody id="consumers"></tbody>
</table>
<h2>In flight</h2>
<table>
  <thead><tr><th class="num">id</th><th>queue</th><th>task</th><th>consumer</th><th class="num">attempt</th><th class="num">running for</th><th class="num">lease left</th><th></th></tr></thead>
  <tbody id="in-flight"></tbody>
</table>
<h2>Dead letters</h2>
<table>
  <thead><tr><th class="num">id</th><th>queue</th><th>task</th><th class="num">attempts</th><th>dead at</th><th>reason</th><th></th></tr></thead>
  <tbody id="dead-letters"></tbody>
</table>
<h2>Counters of this process</h2>
<div id="counters" class="counters"></div>
<script>${script}</script>
</body>
</html>
`
