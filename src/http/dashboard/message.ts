/**
 * The dashboard's message page (`#/message/<id>`), from `GET /api/messages/:id`: where the
 * message stands (state, attempts, lease holder and the time its lease has left, cancel
 * asked, why it died), its payload and headers, every attempt with its error or result,
 * and the actions its state allows (cancel, retry now, redrive, purge: purge asks first),
 * which need the admin token. A finished message is deleted: its page says so and shows its
 * history (`GET /api/messages/:id/attempts`: the result of its last run among it).
 */

/** The view's markup. The progress slot shows what the message's handler last reported. */
export const messageMarkup = `<section id="view-message" data-view="message" hidden>
<h2>Message <span id="message-id"></span></h2>
<div id="message-actions"></div>
<div id="message-confirm"></div>
<table id="message-fields"><tbody id="message-rows"></tbody></table>
<h3>Payload</h3>
<pre id="message-payload"></pre>
<h3>Headers</h3>
<pre id="message-headers"></pre>
<section id="message-progress" data-slot="progress"></section>
<h3>Attempts</h3>
<table>
  <thead><tr><th class="num">attempt</th><th>consumer</th><th>started</th><th>ended</th><th class="num">took</th><th>outcome</th><th>error or result</th></tr></thead>
  <tbody id="message-attempts"></tbody>
</table>
</section>`

/** The view's functions, in the page's script. */
export const messageScript = `
/**
 * The message's progress, in the #message-progress slot: the last value its handler reported
 * (\`context.progress\`, kept on the message as \`progress\` and \`progressAt\`), as text; the
 * slot is empty when none was reported.
 */
const showProgress = (detail) => {
  const m = detail.message;
  const slot = $("message-progress");
  if (m.progress === null || m.progress === undefined) {
    slot.replaceChildren();
    return;
  }
  const title = document.createElement("h3");
  title.textContent = "Progress (reported " + iso(m.progressAt) + ")";
  const value = document.createElement("pre");
  value.id = "message-progress-value";
  value.textContent = pretty(m.progress);
  slot.replaceChildren(title, value);
};

const pretty = (value) => {
  try {
    return JSON.stringify(value, null, 2);
  } catch (error) {
    return String(value);
  }
};

/** The rows of where the message stands, as [field, label, value]. */
const messageFacts = (m, now) => {
  const leaseLeft = m.state === "in-flight" && m.visibleAt ? age(Date.parse(m.visibleAt) - now) : "-";
  return [
    ["queue", "queue", viewLink("/search" + queryOf({ queue: m.queue }), m.queue)],
    ["task", "task", m.task],
    ["state", "state", m.state + (m.cancelRequestedAt ? " (cancel asked " + iso(m.cancelRequestedAt) + ")" : "")],
    ["attempts", "attempts (this drive)", m.attempts + " of " + m.maxAttempts],
    ["priority", "priority", m.priority],
    ["key", "flow key", orDash(m.key)],
    ["dedupKey", "dedup key", orDash(m.dedupKey)],
    ["enqueuedAt", "enqueued", iso(m.enqueuedAt)],
    ["visibleAt", m.state === "in-flight" ? "lease ends" : "visible at", iso(m.visibleAt)],
    ["leasedBy", "lease holder", orDash(m.leasedBy)],
    ["leasedAt", "leased at", iso(m.leasedAt)],
    ["leaseLeft", "lease left", leaseLeft],
    ["leaseExpiries", "lease expiries", m.leaseExpiries],
    ["lastError", "last error", orDash(m.lastError)],
    ["deadReason", "dead reason", orDash(m.deadReason)],
    ["deadAt", "dead at", iso(m.deadAt)]
  ];
};

const attemptRow = (a) => {
  const took = Date.parse(a.endedAt) - Date.parse(a.startedAt);
  const detail = a.error !== null && a.error !== undefined ? a.error : a.result === undefined ? "-" : "result: " + JSON.stringify(a.result);
  const tr = fieldRow([
    ["attempt", a.attempt, "num"], ["consumer", orDash(a.consumer || null)], ["startedAt", iso(a.startedAt)], ["endedAt", iso(a.endedAt)],
    ["took", took > 0 ? age(took) : "0ms", "num"], ["outcome", a.outcome], ["detail", detail, "text"]
  ]);
  tr.dataset.attempt = a.attempt;
  return tr;
};

/** The actions the message's state allows. */
const messageActions = (m) => {
  const id = m.id;
  const out = [];
  if (m.state !== "dead" && !m.cancelRequestedAt) out.push(button("cancel", () => change("api/messages/cancel", { ids: [id] }, "cancel " + id)));
  if (m.state === "delayed") out.push(button("retry now", () => change("api/messages/retry", { ids: [id] }, "retry " + id)));
  if (m.state === "dead") {
    out.push(button("redrive", () => change("api/dead-letters/redrive", { ids: [id] }, "redrive " + id)));
    out.push(button("purge", () => askFirst($("message-confirm"), ["Purge message " + id + " for good?"], "confirm purge",
      () => change("api/dead-letters/purge", { ids: [id] }, "purge " + id))));
  }
  return out;
};

views.message = {
  title: "message",
  enter: (params, id) => {
    $("message-confirm").replaceChildren();
    $("message-id").textContent = id;
  },
  refresh: async (params, id) => {
    let detail;
    try {
      detail = await getJson("api/messages/" + encodeURIComponent(id));
    } catch (error) {
      if (error.status !== 404 && error.status !== 400) throw error;
      // Gone: finished (acked, cancelled or purged) and deleted; its history stays until retention prunes it.
      const history = error.status === 404 ? await getJson("api/messages/" + encodeURIComponent(id) + "/attempts") : [];
      $("message-actions").replaceChildren();
      fill("message-rows", [], 2, error.status === 400 ? "not a message id: " + id
        : history.length === 0 ? "no message " + id + " (never sent, or finished and its history pruned)"
        : "message " + id + " finished and was deleted: its history below (payload and headers are not kept)");
      $("message-payload").textContent = "";
      $("message-headers").textContent = "";
      fill("message-attempts", history.map(attemptRow), 7, "-");
      return;
    }
    const m = detail.message;
    const now = Date.now();
    $("message-actions").replaceChildren(...messageActions(m));
    fill("message-rows", factRows(messageFacts(m, now)), 2, "");
    $("message-payload").textContent = pretty(m.payload);
    $("message-headers").textContent = pretty(m.headers);
    fill("message-attempts", detail.attempts.map(attemptRow), 7, "no attempt yet");
    showProgress(detail);
  }
};
`
