/**
 * The search view's bulk actions: redrive or purge the dead letters the filter selects,
 * cancel them, or retry the delayed ones now. The count comes first (`GET
 * /api/bulk/:action/count`) and the page asks; confirmed, the server runs the action in
 * batches of 500 (`POST /api/bulk/:action`, idempotent: a cut-short run is finished by
 * running it again), and the page says what it did.
 */

/** The panel's markup (inside the search view). */
export const bulkMarkup = `<div id="bulk">
  <label>bulk action on every message the filter selects:
    <select id="bulk-action">
      <option value="redrive">redrive the dead letters</option>
      <option value="purge">purge the dead letters</option>
      <option value="cancel">cancel</option>
      <option value="retry">retry the delayed now</option>
    </select></label>
  <button type="button" id="bulk-start" data-action="bulk">count first</button>
  <div id="bulk-confirm"></div>
</div>`

/** The panel's functions, in the page's script (after the search view's). */
export const bulkScript = `
const bulkVerbs = { redrive: "redrive", purge: "purge (delete for good)", cancel: "cancel", retry: "retry now" };

$("bulk-start").addEventListener("click", async () => {
  const action = $("bulk-action").value;
  const filter = searchFilter(route().params);
  const box = $("bulk-confirm");
  let answer;
  try {
    answer = await getJson("api/bulk/" + action + "/count" + queryOf(filter));
  } catch (error) {
    notice("bulk " + action + ": " + (error && error.message ? error.message : error), false);
    return;
  }
  if (answer.count === 0) {
    askFirst(box, ["No message matches: nothing to " + action + "."], "ok", async () => {});
    return;
  }
  askFirst(box, ["This will " + bulkVerbs[action] + " ", answer.count, " message(s) matching " + (Object.keys(filter).length === 0 ? "no filter (every one)" : JSON.stringify(filter)) + ". Go ahead?"],
    "confirm " + action, async () => {
      notice("bulk " + action + ": running...", true);
      const outcome = await send("POST", "api/bulk/" + action, { ...filter, confirmed: answer.count }, "bulk " + action);
      if (outcome !== undefined) {
        notice("bulk " + action + ": " + outcome.touched + " message(s) in " + outcome.batches + " batch(es)" + (outcome.more ? "; more left, run it again" : ""), true);
      }
      refresh();
    });
});
`
