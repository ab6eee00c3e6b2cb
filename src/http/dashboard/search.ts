/**
 * The dashboard's message search (`#/search?queue=..&payload=..`): a filter form (queue, task,
 * state, key, id range, a payload field as `customer.id = 42`) whose fields are the view's
 * URL, so a search is a link; results newest first from `GET /api/messages`, a keyset page at
 * a time (`before` in the URL too); the bulk actions (`bulk.ts`) act on what the URL's filter
 * selects.
 */
import { bulkMarkup } from "./bulk.ts"

/** The fields of the filter, in the form's order: [name, label, size, placeholder]. */
const filterFields: ReadonlyArray<readonly [string, string, number, string]> = [
  ["queue", "queue", 12, ""],
  ["task", "task", 12, ""],
  ["key", "key", 10, ""],
  ["from", "from id", 8, ""],
  ["to", "to id", 8, ""],
  ["payload", "payload field", 22, "customer.id = 42"]
]

const input = ([name, label, size, placeholder]: readonly [string, string, number, string]) =>
  `<label>${label} <input name="${name}" size="${size}" autocomplete="off"${placeholder === "" ? "" : ` placeholder="${placeholder}"`}></label>`

/** The view's markup. */
export const searchMarkup = `<section id="view-search" data-view="search" hidden>
<h2>Messages</h2>
<form id="search-form" class="filter">
  ${filterFields.slice(0, 2).map(input).join("\n  ")}
  <label>state <select name="state"><option value="">any</option><option>ready</option><option>delayed</option><option>in-flight</option><option>dead</option></select></label>
  ${filterFields.slice(2).map(input).join("\n  ")}
  <button type="submit" data-action="search">search</button>
</form>
${bulkMarkup}
<table>
  <thead><tr><th class="num">id</th><th>queue</th><th>task</th><th>state</th><th class="num">attempts</th><th>key</th><th>enqueued</th><th>last error</th></tr></thead>
  <tbody id="search-results"></tbody>
</table>
<p><button type="button" id="search-first" data-action="first page">first page</button><button type="button" id="search-next" data-action="next page">next page</button>
<span id="search-summary" class="empty"></span></p>
</section>`

/** The view's functions, in the page's script. */
export const searchScript = `
const searchFilterNames = ["queue", "task", "state", "key", "from", "to", "payload"];
const searchState = { next: null };

/** The filter of the view's URL (what the results and the bulk actions go by). */
const searchFilter = (params) => {
  const filter = {};
  for (const name of searchFilterNames) {
    const v = params.get(name);
    if (v !== null && v !== "") filter[name] = v;
  }
  return filter;
};

const searchRow = (m) => {
  const tr = fieldRow([
    ["id", viewLink("/message/" + m.id, m.id), "num"], ["queue", m.queue], ["task", m.task], ["state", m.state + (m.cancelRequestedAt ? " (cancelling)" : "")],
    ["attempts", m.attempts + " of " + m.maxAttempts, "num"], ["key", orDash(m.key)], ["enqueued", iso(m.enqueuedAt)], ["lastError", orDash(m.lastError), "text"]
  ]);
  tr.dataset.message = m.id;
  return tr;
};

$("search-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const form = new FormData($("search-form"));
  const filter = {};
  for (const name of searchFilterNames) filter[name] = String(form.get(name) || "").trim();
  location.hash = "/search" + queryOf(filter);
});
$("search-next").addEventListener("click", () => {
  if (searchState.next === null) return;
  location.hash = "/search" + queryOf({ ...searchFilter(route().params), before: searchState.next });
});
$("search-first").addEventListener("click", () => {
  location.hash = "/search" + queryOf(searchFilter(route().params));
});

views.search = {
  title: "messages",
  /** On arriving at the view: the form shows the URL's filter. */
  enter: (params) => {
    const form = $("search-form");
    for (const name of searchFilterNames) form.elements[name].value = params.get(name) || "";
    $("bulk-confirm").replaceChildren();
  },
  refresh: async (params) => {
    const filter = searchFilter(params);
    const before = params.get("before");
    const page = await getJson("api/messages" + queryOf({ ...filter, before, limit: 50 }));
    searchState.next = page.next;
    fill("search-results", page.messages.map(searchRow), 8, "no message matches");
    $("search-next").disabled = page.next === null;
    $("search-first").disabled = before === null;
    $("search-summary").textContent = page.messages.length + " shown, newest first" + (before === null ? "" : " (ids below " + before + ")") +
      (page.next === null ? "" : "; more on the next page");
  }
};
`
