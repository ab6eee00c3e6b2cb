/**
 * The dashboard's shared script and style: the token, requests (relative to the page, so the
 * dashboard works under any path a reverse proxy serves it at), formatting, and the builders
 * every view uses (cells, buttons, tables, links, the confirmation box). Every value from the
 * server goes in as text (`textContent`), never as HTML.
 */

/** The style every view shares. */
export const commonStyle = `
:root { color-scheme: light dark; --line: #8884; --muted: #888; --bad: #c33; --ok: #2a7; --warn: #c80; }
* { box-sizing: border-box; }
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; padding: 16px 24px; }
header { display: flex; flex-wrap: wrap; gap: 12px; align-items: center; margin-bottom: 8px; }
h1 { font-size: 20px; margin: 0 12px 0 0; }
h2 { font-size: 15px; margin: 20px 0 6px; }
nav a { margin-right: 10px; }
nav a.current { font-weight: bold; text-decoration: none; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); white-space: nowrap; vertical-align: top; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td.text { white-space: normal; max-width: 40em; overflow-wrap: anywhere; }
tr.paused td { color: var(--muted); }
.empty { color: var(--muted); font-style: italic; }
.bad { color: var(--bad); }
#status { color: var(--muted); }
#status.error, #notice.error { color: var(--bad); }
#notice { min-height: 1.4em; }
#notice.ok { color: var(--ok); }
button { font: inherit; padding: 1px 8px; margin-right: 4px; cursor: pointer; }
pre { margin: 0; padding: 8px; border: 1px solid var(--line); overflow: auto; max-height: 24em; white-space: pre-wrap; overflow-wrap: anywhere; }
form.filter { display: flex; flex-wrap: wrap; gap: 6px 12px; align-items: end; }
form.filter label { display: flex; flex-direction: column; font-size: 12px; color: var(--muted); }
form.filter input, form.filter select { font: inherit; }
.confirm { border: 1px solid var(--warn); padding: 8px 12px; margin: 8px 0; }
.confirm b { font-variant-numeric: tabular-nums; }
`

/** The script every view shares (first in the page's one script). */
export const commonScript = `
"use strict";
const $ = (id) => document.getElementById(id);
const tokenField = $("token");
tokenField.value = sessionStorage.getItem("leasehold-token") || "";

/** Where the page is served (a reverse proxy may put it under a path of its own): every request is relative to it. */
const basePath = location.pathname.endsWith("/") ? location.pathname : location.pathname.replace(/[^/]*$/, "");
const apiUrl = (path) => basePath + path.replace(/^\\//, "");

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

const iso = (at) => at === null || at === undefined ? "-" : new Date(at).toISOString();
const orDash = (value) => value === null || value === undefined ? "-" : value;

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

/** A link to a view of the page (a hash route), its text \`text\`. */
const viewLink = (hash, text) => {
  const a = document.createElement("a");
  a.href = "#" + hash;
  a.textContent = String(text);
  return a;
};

/** A <td> holding \`node\`. */
const nodeCell = (node, cls) => {
  const td = document.createElement("td");
  if (cls) td.className = cls;
  td.appendChild(node);
  return td;
};

/** A <tr> of [field, text, class] cells, each cell's field in data-field. */
const fieldRow = (cells) => {
  const tr = document.createElement("tr");
  for (const [field, text, cls] of cells) {
    const td = text instanceof Node ? nodeCell(text, cls) : cell(text, cls);
    td.dataset.field = field;
    tr.appendChild(td);
  }
  return tr;
};

/** <tr>s of [field, label, value] facts: the label a <th>, the value (text or a node) a <td> with its field in data-field. */
const factRows = (facts) => facts.map(([field, label, value]) => {
  const tr = document.createElement("tr");
  const th = document.createElement("th");
  th.textContent = label;
  const td = value instanceof Node ? nodeCell(value, "text") : cell(value, "text");
  td.dataset.field = field;
  tr.append(th, td);
  return tr;
});

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

/** Send a changing request with the bearer token; report the server's answer; the answer, or undefined when refused. */
const send = async (method, path, body, what) => {
  try {
    const response = await fetch(apiUrl(path), {
      method,
      headers: { "content-type": "application/json", ...authorization() },
      body: JSON.stringify(body || {})
    });
    const answer = await response.json().catch(() => ({}));
    if (response.ok) {
      notice(what + ": done", true);
      return answer;
    }
    notice(what + ": " + response.status + " " + (answer.message || response.statusText), false);
  } catch (error) {
    notice(what + ": " + error, false);
  }
  return undefined;
};

/** POST a changing route, then refresh the view. */
const change = async (path, body, what) => {
  const answer = await send("POST", path, body, what);
  refresh();
  return answer;
};

const getJson = async (path) => {
  const response = await fetch(apiUrl(path), { headers: { accept: "application/json", ...authorization() } });
  if (!response.ok) {
    const answer = await response.json().catch(() => ({}));
    const error = new Error(path + ": " + response.status + " " + (answer.message || response.statusText));
    error.status = response.status;
    throw error;
  }
  return response.json();
};

/** A query string of the non-empty fields of \`params\`. */
const queryOf = (params) => {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, String(v));
  const text = q.toString();
  return text === "" ? "" : "?" + text;
};

/**
 * Show in \`box\` a question (its parts text, the count bold) with a confirm and a cancel button;
 * \`onYes\` runs on confirm. The box is emptied either way.
 */
const askFirst = (box, parts, yesLabel, onYes) => {
  box.replaceChildren();
  const div = document.createElement("div");
  div.className = "confirm";
  div.dataset.confirm = yesLabel;
  for (const part of parts) {
    if (typeof part === "number") {
      const b = document.createElement("b");
      b.textContent = String(part);
      b.dataset.field = "count";
      div.appendChild(b);
    } else div.appendChild(document.createTextNode(part));
  }
  div.appendChild(document.createTextNode(" "));
  div.append(
    button(yesLabel, async () => {
      box.replaceChildren();
      await onYes();
    }),
    button("cancel", () => box.replaceChildren())
  );
  box.appendChild(div);
};
`
