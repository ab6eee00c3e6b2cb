/**
 * The dashboard's overview (`#/`): the fleet's charts (`charts.ts`), the queues with
 * pause/resume, flow control (`dashboardFlow.ts`), consumers, in-flight messages with cancel,
 * dead letters with redrive/purge, and the counters of the serving process. Ids link to the
 * message page, queues to a search of the queue.
 */
import { flowMarkup } from "../dashboardFlow.ts"
import { chartsMarkup } from "./charts.ts"

/** The view's markup. */
export const overviewMarkup = `<section id="view-overview" data-view="overview">
${chartsMarkup}
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
<h2>Counters of the serving process</h2>
<p class="empty">This server's own metrics: they count only what consumers running in this process did (all zero for a standalone
<code>leasehold serve</code>). The fleet's figures are the charts above, read from the database.</p>
<div id="counters" class="counters"></div>
</section>`

/** The view's style. */
export const overviewStyle = `
.counters { display: flex; flex-wrap: wrap; gap: 8px 24px; }
.counters div { min-width: 9em; }
.counters b { display: block; font-size: 18px; font-variant-numeric: tabular-nums; }
`

/** The view's functions, in the page's script. */
export const overviewScript = `
const queueRow = (q) => {
  const tr = document.createElement("tr");
  tr.dataset.queue = q.queue;
  if (q.paused) tr.className = "paused";
  tr.append(
    nodeCell(viewLink("/search" + queryOf({ queue: q.queue }), q.queue)),
    cell(q.ready, "num"), cell(q.delayed, "num"), cell(q.inFlight, "num"), cell(q.dead, "num"),
    cell(age(q.oldestReadyAgeMs), "num"),
    cell(q.paused ? "paused" : "no")
  );
  for (const td of tr.children) td.dataset.field = ["queue", "ready", "delayed", "inFlight", "dead", "oldestReady", "paused"][td.cellIndex];
  const actions = document.createElement("td");
  const verb = q.paused ? "resume" : "pause";
  actions.appendChild(button(verb, () => change("api/queues/" + encodeURIComponent(q.queue) + "/" + verb, {}, verb + " " + q.queue)));
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
  tr.append(nodeCell(viewLink("/message/" + m.id, m.id), "num"), cell(m.queue), cell(m.task), cell(m.leasedBy), cell(m.attempts + " of " + m.maxAttempts, "num"),
    cell(leasedAt === null ? "-" : age(now - leasedAt), "num"), cell(leaseEnd === null ? "-" : age(leaseEnd - now), "num"));
  const actions = document.createElement("td");
  if (m.cancelRequestedAt) actions.textContent = "cancelling";
  else actions.appendChild(button("cancel", () => change("api/messages/cancel", { ids: [m.id] }, "cancel " + m.id)));
  tr.appendChild(actions);
  return tr;
};

const deadRow = (d) => {
  const tr = document.createElement("tr");
  tr.dataset.message = d.id;
  tr.append(nodeCell(viewLink("/message/" + d.id, d.id), "num"), cell(d.queue), cell(d.task), cell(d.attempts, "num"), cell(iso(d.deadAt)),
    cell(d.reason, "text"));
  const actions = document.createElement("td");
  actions.append(
    button("redrive", () => change("api/dead-letters/redrive", { ids: [d.id] }, "redrive " + d.id)),
    button("purge", () => change("api/dead-letters/purge", { ids: [d.id] }, "purge " + d.id))
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

const showCounters = (counters) => {
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
};

views.overview = {
  title: "overview",
  refresh: async () => {
    const [queues, consumers, flight, dead, counters, flow] = await Promise.all([
      getJson("api/queues"), getJson("api/consumers"), getJson("api/in-flight"),
      getJson("api/dead-letters?limit=100"), getJson("api/counters"), readFlow(), refreshCharts()
    ]);
    const now = Date.now();
    fill("queues", queues.map(queueRow), 8, "no queue has messages");
    fill("consumers", consumers.map(consumerRow), 6, "no consumer registered (session liveness off, or none running)");
    fill("in-flight", flight.map((m) => flightRow(m, now)), 8, "nothing in flight");
    fill("dead-letters", dead.map(deadRow), 7, "no dead letters");
    showFlow(flow, now);
    showCounters(counters);
    showChartQueues(queues);
  }
};
`
