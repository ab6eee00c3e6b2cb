/**
 * The overview's charts of the fleet, drawn as inline SVG by the page's own script (no
 * library, no build step; the CSP admits it by hash, and the SVG is styled by classes, never
 * by a style attribute):
 *
 * - finished attempts per minute over the last hour (completed, retried, dead-lettered,
 *   lease-lost, cancelled) from `GET /api/stats/throughput`: the whole hour once a minute,
 *   the last two minutes on every refresh (the history is counted, so a refresh reads little);
 * - queue depths over the last three hours from `GET /api/stats/depth` (the samples a worker
 *   stores every 10 s), every 10 s;
 * - the hour's totals per queue and task.
 *
 * Both charts can be narrowed to one queue. The SVG carries its figures in data attributes
 * (`data-total`, `data-samples`) for tests.
 */

/** The charts' place in the overview. */
export const chartsMarkup = `<h2>Fleet throughput <span class="empty">finished attempts per minute, every worker, last hour (from the attempt history)</span></h2>
<label>queue <select id="chart-queue"><option value="">all queues</option></select></label>
<div id="chart-throughput" class="chart"></div>
<h2>Queue depth <span class="empty">sampled into the database every 10 s by one worker, last 3 hours</span></h2>
<div id="chart-depth" class="chart"></div>
<h2>Last hour per queue and task</h2>
<table>
  <thead><tr><th>queue</th><th>task</th><th class="num">completed</th><th class="num">retried</th><th class="num">dead-lettered</th><th class="num">lease lost</th><th class="num">cancelled</th><th class="num">completed / min</th></tr></thead>
  <tbody id="throughput-rows"></tbody>
</table>`

/** The charts' style. */
export const chartsStyle = `
.chart svg { display: block; width: 100%; max-width: 960px; height: auto; }
.chart .axis { stroke: var(--line); stroke-width: 1; }
.chart text { fill: var(--muted); font-size: 11px; }
.chart polyline { fill: none; stroke-width: 1.5; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 16px; font-size: 12px; margin: 2px 0 8px; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
.s-completed { stroke: #2a7; background: #2a7; }
.s-retried { stroke: #c80; background: #c80; }
.s-deadLettered { stroke: #c33; background: #c33; }
.s-leaseLost { stroke: #84c; background: #84c; }
.s-cancelled { stroke: #888; background: #888; }
.s-ready { stroke: #27c; background: #27c; }
.s-delayed { stroke: #c80; background: #c80; }
.s-inFlight { stroke: #2a7; background: #2a7; }
.s-dead { stroke: #c33; background: #c33; }
`

/** The charts' functions, in the page's script (before the overview's). */
export const chartsScript = `
const svgNs = "http://www.w3.org/2000/svg";
const svgEl = (name, attributes, text) => {
  const e = document.createElementNS(svgNs, name);
  for (const [k, v] of Object.entries(attributes)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = String(text);
  return e;
};
const minuteMs = 60000;
const throughputSeries = [["completed", "completed"], ["retried", "retried"], ["deadLettered", "dead-lettered"], ["leaseLost", "lease lost"], ["cancelled", "cancelled"]];
const depthSeries = [["ready", "ready"], ["delayed", "delayed"], ["inFlight", "in flight"], ["dead", "dead"]];
const chartState = { queue: "", buckets: new Map(), fullAt: 0, depthAt: 0, now: 0, queues: "" };

/**
 * A line chart in \`box\`: x from \`from\` to \`to\` (ms), one polyline per series
 * ({ key, label, points: [[x, y]] }), the largest value on the y axis, a legend with each total.
 */
const lineChart = (box, kind, from, to, series, data) => {
  const width = 960, height = 180, left = 44, right = 8, top = 8, bottom = 20;
  const max = Math.max(1, ...series.flatMap((s) => s.points.map((p) => p[1])));
  const x = (t) => left + (to === from ? 0 : (t - from) / (to - from)) * (width - left - right);
  const y = (v) => top + (1 - v / max) * (height - top - bottom);
  const svg = svgEl("svg", { viewBox: "0 0 " + width + " " + height, role: "img", "aria-label": kind });
  svg.dataset.chart = kind;
  for (const [k, v] of Object.entries(data)) svg.dataset[k] = String(v);
  svg.append(
    svgEl("line", { class: "axis", x1: left, y1: y(0), x2: width - right, y2: y(0) }),
    svgEl("line", { class: "axis", x1: left, y1: top, x2: left, y2: y(0) }),
    svgEl("text", { x: left - 4, y: top + 10, "text-anchor": "end" }, max),
    svgEl("text", { x: left - 4, y: y(0), "text-anchor": "end" }, 0),
    svgEl("text", { x: left, y: height - 4 }, new Date(from).toISOString().slice(11, 16)),
    svgEl("text", { x: width - right, y: height - 4, "text-anchor": "end" }, "now " + new Date(to).toISOString().slice(11, 19) + " UTC")
  );
  const legend = document.createElement("div");
  legend.className = "legend";
  for (const s of series) {
    if (s.points.length > 0) {
      svg.appendChild(svgEl("polyline", { class: "s-" + s.key, "data-series": s.key, points: s.points.map((p) => x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1)).join(" ") }));
    }
    const item = document.createElement("span");
    const swatch = document.createElement("span");
    swatch.className = "swatch s-" + s.key;
    item.append(swatch, document.createTextNode(s.label + (s.total === undefined ? "" : " " + s.total)));
    legend.appendChild(item);
  }
  box.replaceChildren(svg, legend);
};

/** The buckets of a throughput answer, by minute (ms), replacing those from \`from\` on. */
const mergeThroughput = (answer, full) => {
  const now = Date.parse(answer.now);
  const first = Math.floor(now / minuteMs) * minuteMs - (answer.minutes - 1) * minuteMs;
  if (full) chartState.buckets = new Map();
  for (const minute of [...chartState.buckets.keys()]) if (minute >= first || minute < now - 60 * minuteMs) chartState.buckets.delete(minute);
  for (const row of answer.rows) {
    const minute = Date.parse(row.minute);
    if (!chartState.buckets.has(minute)) chartState.buckets.set(minute, []);
    chartState.buckets.get(minute).push(row);
  }
  chartState.now = now;
};

const drawThroughput = () => {
  const end = Math.floor(chartState.now / minuteMs) * minuteMs;
  const from = end - 59 * minuteMs;
  const perTask = new Map();
  const series = throughputSeries.map(([key, label]) => ({ key, label, points: [], total: 0 }));
  for (let minute = from; minute <= end; minute += minuteMs) {
    const rows = chartState.buckets.get(minute) || [];
    for (const s of series) {
      const n = rows.reduce((sum, r) => sum + r[s.key], 0);
      s.points.push([minute, n]);
      s.total += n;
    }
    for (const r of rows) {
      const id = r.queue + "\\u0000" + r.task;
      const t = perTask.get(id) || { queue: r.queue, task: r.task, completed: 0, retried: 0, deadLettered: 0, leaseLost: 0, cancelled: 0 };
      for (const [key] of throughputSeries) t[key] += r[key];
      perTask.set(id, t);
    }
  }
  const total = series.reduce((sum, s) => sum + s.total, 0);
  lineChart($("chart-throughput"), "throughput", from, end, series, { total, completed: series[0].total });
  fill("throughput-rows", [...perTask.values()].map((t) => fieldRow([
    ["queue", viewLink("/search" + queryOf({ queue: t.queue }), t.queue)], ["task", t.task], ["completed", t.completed, "num"], ["retried", t.retried, "num"],
    ["deadLettered", t.deadLettered, "num"], ["leaseLost", t.leaseLost, "num"], ["cancelled", t.cancelled, "num"],
    ["perMinute", (t.completed / 60).toFixed(1), "num"]
  ])), 8, "nothing finished in the last hour");
};

const drawDepth = (answer) => {
  const now = Date.parse(answer.now);
  const from = now - answer.minutes * minuteMs;
  const byTime = new Map();
  for (const s of answer.samples) {
    const at = Date.parse(s.at);
    const sum = byTime.get(at) || { ready: 0, delayed: 0, inFlight: 0, dead: 0 };
    for (const [key] of depthSeries) sum[key] += s[key];
    byTime.set(at, sum);
  }
  const times = [...byTime.keys()].sort((a, b) => a - b);
  const last = times.length === 0 ? undefined : byTime.get(times[times.length - 1]);
  const series = depthSeries.map(([key, label]) => ({ key, label: label + (last === undefined ? "" : " (now)"), total: last === undefined ? undefined : last[key],
    points: times.map((t) => [t, byTime.get(t)[key]]) }));
  lineChart($("chart-depth"), "depth", from, now, series, { samples: times.length });
  if (times.length === 0) {
    const note = document.createElement("p");
    note.className = "empty";
    note.textContent = "no samples yet: a running worker stores one every " + Math.round(answer.everyMs / 1000) + " s";
    $("chart-depth").appendChild(note);
  }
};

/** Refresh both charts (a failure is shown in the chart, not in the page's status: the rest still refreshes). */
const refreshCharts = async () => {
  const queue = $("chart-queue").value;
  const changed = queue !== chartState.queue;
  chartState.queue = queue;
  const now = Date.now();
  try {
    const full = changed || now - chartState.fullAt > minuteMs;
    const answer = await getJson("api/stats/throughput" + queryOf({ minutes: full ? 60 : 2, queue }));
    if (!answer.available) {
      $("chart-throughput").textContent = "The fleet's figures are read from the PostgreSQL store: this server's store has none.";
      $("chart-depth").replaceChildren();
      return;
    }
    if (full) chartState.fullAt = now;
    mergeThroughput(answer, full);
    drawThroughput();
    if (changed || now - chartState.depthAt > 10000) {
      chartState.depthAt = now;
      drawDepth(await getJson("api/stats/depth" + queryOf({ minutes: 180, queue })));
    }
  } catch (error) {
    if (error.status === 401 || error.status === 403) throw error;
    $("chart-throughput").textContent = "charts unavailable: " + (error && error.message ? error.message : error);
  }
};

/** Offer every queue listed in the chart's queue selector (the selection kept). */
const showChartQueues = (queues) => {
  const names = queues.map((q) => q.queue).join("\\u0000");
  if (names === chartState.queues) return;
  chartState.queues = names;
  const select = $("chart-queue");
  const kept = select.value;
  const all = document.createElement("option");
  all.value = "";
  all.textContent = "all queues";
  select.replaceChildren(all, ...queues.map((q) => {
    const o = document.createElement("option");
    o.value = q.queue;
    o.textContent = q.queue;
    return o;
  }));
  select.value = queues.some((q) => q.queue === kept) ? kept : "";
};
$("chart-queue").addEventListener("change", () => refresh());
`
