/**
 * The dashboard page served at `/` next to the admin API: one self-contained HTML document
 * (inline CSS and script, no framework, no CDN, no build step, works offline) with a view per
 * hash route, each a module of `dashboard/`:
 *
 * - `#/` the overview (`overview.ts`): the fleet's charts (`charts.ts`), queues, flow control,
 *   consumers, in flight, dead letters, the serving process's counters;
 * - `#/search?queue=..&payload=..` the message search with its bulk actions (`search.ts`, `bulk.ts`);
 * - `#/message/<id>` one message (`message.ts`);
 * - `#/schedules` (`schedules.ts`) and `#/consumers` (`consumers.ts`);
 * - `#/workflows?status=..&workflow=..` the workflow executions, `#/workflow/<workflow>/<id>` one
 *   execution (`workflows.ts`).
 *
 * The current view reads its `/api` routes every 2 s. Every request is relative to the page,
 * so behind a reverse proxy that serves the dashboard under a path of its own (and strips it)
 * the page works unchanged. Every value from the server is put in the page as text
 * (`textContent`), never as HTML. Every request sends the token typed into the token field
 * (kept in sessionStorage) as `Authorization: Bearer <token>`. The page itself holds no
 * data, so it is served without a token; it runs under a Content-Security-Policy that admits
 * only its own inline script and style (by hash: see `Http`), so it sets no inline event
 * handler and no style attribute (the charts are styled by class).
 */
import { commonScript, commonStyle } from "./dashboard/common.ts"
import { bulkScript } from "./dashboard/bulk.ts"
import { chartsScript, chartsStyle } from "./dashboard/charts.ts"
import { consumersMarkup, consumersScript } from "./dashboard/consumers.ts"
import { messageMarkup, messageScript } from "./dashboard/message.ts"
import { overviewMarkup, overviewScript, overviewStyle } from "./dashboard/overview.ts"
import { schedulesMarkup, schedulesScript } from "./dashboard/schedules.ts"
import { searchMarkup, searchScript } from "./dashboard/search.ts"
import { workflowsMarkup, workflowsScript, workflowsStyle } from "./dashboard/workflows.ts"
import { flowScript, flowStyle } from "./dashboardFlow.ts"

/** The views in the navigation: [route, label]. */
const navigation: ReadonlyArray<readonly [string, string]> = [
  ["overview", "overview"],
  ["search", "messages"],
  ["schedules", "schedules"],
  ["consumers", "consumers"],
  ["workflows", "workflows"]
]

/** Which view the URL names, and the refresh loop of the current one. */
const routerScript = `
/** The view of the URL's hash: #/<view>/<id>/..?<params> (#/ or none: the overview); path: the decoded parts after the view. */
const route = () => {
  const hash = location.hash.replace(/^#/, "");
  const at = hash.indexOf("?");
  const parts = (at === -1 ? hash : hash.slice(0, at)).split("/").filter((p) => p !== "");
  const name = parts[0] !== undefined && views[parts[0]] !== undefined ? parts[0] : "overview";
  const rest = parts.slice(1).map(decodeURIComponent);
  return { name, id: rest[0], path: rest, params: new URLSearchParams(at === -1 ? "" : hash.slice(at + 1)), key: name + "/" + parts.slice(1).join("/") + "?" + (at === -1 ? "" : hash.slice(at + 1)) };
};

let shown = "";
/** Show the URL's view (and, arriving at it, let it set itself up). */
const show = () => {
  const r = route();
  for (const section of document.querySelectorAll("section[data-view]")) section.hidden = section.dataset.view !== r.name;
  for (const link of document.querySelectorAll("nav a[data-nav]")) link.className = link.dataset.nav === r.name ? "current" : "";
  document.title = "leasehold: " + views[r.name].title;
  if (r.key !== shown) {
    shown = r.key;
    if (views[r.name].enter) views[r.name].enter(r.params, r.id, r.path);
  }
  return r;
};

let refreshing = false;
let again = false;
async function refresh() {
  // One refresh at a time; one asked for meanwhile (the token or the view changed) runs right after.
  if (refreshing) {
    again = true;
    return;
  }
  refreshing = true;
  try {
    const r = show();
    await views[r.name].refresh(r.params, r.id, r.path);
    $("status").textContent = "updated " + new Date().toLocaleTimeString() + " (every 2 s)";
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
tokenField.addEventListener("input", () => {
  sessionStorage.setItem("leasehold-token", tokenField.value);
  refresh();
});
window.addEventListener("hashchange", () => refresh());
refresh();
setInterval(refresh, 2000);
`

const style = commonStyle + overviewStyle + chartsStyle + flowStyle + workflowsStyle

const script = [
  commonScript,
  "const views = {};\n",
  flowScript,
  chartsScript,
  overviewScript,
  searchScript,
  bulkScript,
  messageScript,
  schedulesScript,
  consumersScript,
  workflowsScript,
  routerScript
].join("\n")

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
  <nav>${navigation.map(([route, label]) => `<a href="#/${route === "overview" ? "" : route}" data-nav="${route}">${label}</a>`).join("")}</nav>
  <label>admin token <input id="token" type="password" autocomplete="off" size="28" placeholder="LEASEHOLD_ADMIN_TOKEN"></label>
  <span id="status">loading...</span>
  <a href="docs">API reference</a>
</header>
<div id="notice"></div>
${overviewMarkup}
${searchMarkup}
${messageMarkup}
${schedulesMarkup}
${consumersMarkup}
${workflowsMarkup}
<script>${script}</script>
</body>
</html>
`
