/**
 * The dashboard's schedules page (`#/schedules`), from `GET /api/schedules`: each stored
 * schedule's cron and zone, queue and task, its last and next slot, when it last fired, and
 * whether a running worker still declares it (NOT SEEN otherwise, as the CLI says), with a
 * trigger button (`POST /api/schedules/:key/trigger`, admin token).
 */

/** The view's markup. */
export const schedulesMarkup = `<section id="view-schedules" data-view="schedules" hidden>
<h2>Schedules</h2>
<table>
  <thead><tr><th>key</th><th>cron</th><th>zone</th><th>queue</th><th>task</th><th>last slot</th><th>next slot</th><th class="num">in</th><th>last fired</th><th>declared</th><th></th></tr></thead>
  <tbody id="schedules"></tbody>
</table>
</section>`

/** The view's functions, in the page's script. */
export const schedulesScript = `
const scheduleRow = (s, now) => {
  const tr = fieldRow([
    ["key", s.key], ["cron", s.cron], ["tz", s.tz], ["queue", viewLink("/search" + queryOf({ queue: s.queue }), s.queue)], ["task", s.task],
    ["lastSlot", iso(s.lastSlot)], ["nextSlot", iso(s.nextSlot)], ["due", s.nextSlot === null ? "-" : age(Date.parse(s.nextSlot) - now), "num"],
    ["firedAt", iso(s.firedAt)],
    ["seen", s.seen ? "yes, by " + s.lastSeenBy + " " + age(now - Date.parse(s.lastSeenAt)) + " ago" : "NOT SEEN for " + age(now - Date.parse(s.lastSeenAt))]
  ]);
  tr.dataset.schedule = s.key;
  if (!s.seen) tr.querySelector('[data-field="seen"]').className = "bad";
  const actions = document.createElement("td");
  actions.appendChild(button("trigger", () => change("api/schedules/" + encodeURIComponent(s.key) + "/trigger", {}, "trigger " + s.key)));
  tr.appendChild(actions);
  return tr;
};

views.schedules = {
  title: "schedules",
  refresh: async () => {
    const schedules = await getJson("api/schedules");
    const now = Date.now();
    fill("schedules", schedules.map((s) => scheduleRow(s, now)), 11, "no schedule stored (a worker with a Scheduler declares its own)");
  }
};
`
