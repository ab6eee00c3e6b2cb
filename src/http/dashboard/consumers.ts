/**
 * The dashboard's consumers page (`#/consumers`), from `GET /api/consumers` and `GET
 * /api/in-flight`: each registered consumer's host and pid, when it started, its queues,
 * concurrency and lease (as its heartbeat writes them), its heartbeat's age and what that says
 * of its liveness, whether it has session liveness (its claims are released within seconds of
 * its death) or relies on lease expiry, and the messages it holds now (their queues, the
 * shortest lease left).
 */

/** A heartbeat older than this reads as stale (the reaper's default bound is 30 s). */
export const staleHeartbeatMs = 30_000

/** The view's markup. */
export const consumersMarkup = `<section id="view-consumers" data-view="consumers" hidden>
<h2>Consumers</h2>
<table>
  <thead><tr><th>consumer</th><th>host</th><th class="num">pid</th><th>started</th><th class="num">heartbeat age</th><th>liveness</th><th>session liveness</th><th>queues</th><th class="num">concurrency</th><th class="num">lease</th><th class="num">in flight</th><th>holding from</th><th class="num">shortest lease left</th></tr></thead>
  <tbody id="consumer-rows"></tbody>
</table>
</section>`

/** The view's functions, in the page's script. */
export const consumersScript = `
const staleHeartbeatMs = ${staleHeartbeatMs};
const consumerDetailRow = (c, held, now) => {
  const queues = [...new Set(held.map((m) => m.queue))].sort();
  const leaseLeft = held.length === 0 ? null : Math.min(...held.map((m) => Date.parse(m.visibleAt) - now));
  const tr = fieldRow([
    ["id", c.id], ["host", c.host], ["pid", c.pid, "num"], ["startedAt", iso(c.startedAt)], ["heartbeatAge", age(c.heartbeatAgeMs), "num"],
    ["liveness", c.heartbeatAgeMs <= staleHeartbeatMs ? "alive" : "stale: no heartbeat for " + age(c.heartbeatAgeMs)],
    ["sessionLiveness", c.sessionLiveness ? "yes" : "lease expiry only"],
    ["queues", c.settings === null ? "-" : c.settings.queues.join(", "), "text"],
    ["concurrency", c.settings === null ? "-" : c.settings.concurrency, "num"], ["lease", c.settings === null ? "-" : age(c.settings.leaseMs), "num"],
    ["inFlight", c.inFlight, "num"],
    ["holding", queues.length === 0 ? "-" : queues.join(", "), "text"], ["leaseLeft", leaseLeft === null ? "-" : age(leaseLeft), "num"]
  ]);
  tr.dataset.consumer = c.id;
  if (c.heartbeatAgeMs > staleHeartbeatMs) tr.querySelector('[data-field="liveness"]').className = "bad";
  return tr;
};

views.consumers = {
  title: "consumers",
  refresh: async () => {
    const [consumers, flight] = await Promise.all([getJson("api/consumers"), getJson("api/in-flight")]);
    const now = Date.now();
    fill("consumer-rows", consumers.map((c) => consumerDetailRow(c, flight.filter((m) => m.leasedBy === c.id), now)), 13,
      "no consumer registered (session liveness off, or none running)");
  }
};
`

