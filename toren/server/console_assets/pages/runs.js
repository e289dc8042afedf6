// Runs: start a run (an input and files to attach), and the runs with filters (words in the
// input or output, agent, status, kind, schedule, version, dates), newest first or sorted by
// a column (duration, cost, model calls, steps), each run's agent version, duration and
// totals, a page at a time (the URL holds the filters, the sort and the page, so a view can
// be shared), refreshed every two seconds.
"use strict";

// The start-run form: an agent, the input, files to attach (each uploaded with POST /files,
// then POST /runs names them); a new run opens its page.
function startRunForm(agents) {
  const { el, api } = Toren;
  const agent = el("select", { id: "run-agent", "aria-label": "Agent" },
    agents.map((name) => el("option", { value: name }, name)));
  const input = el("textarea", { id: "run-input", rows: 2, placeholder: "The input",
    "aria-label": "Input" });
  const files = el("input", { type: "file", id: "run-files", multiple: true });
  const start = el("button", { type: "submit", id: "start-run" }, "Start run");
  const note = el("div", { id: "start-run-status", class: "muted", role: "status" });
  const form = el("form", { class: "start-run", id: "start-run-form" },
    el("strong", {}, "Start a run of "), agent, input,
    el("label", { class: "attach" }, "Attach files ", files), start, note);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!input.value.trim()) {
      note.replaceChildren(el("span", { class: "error" }, "Give the run an input."));
      return;
    }
    start.disabled = true;
    try {
      const stored = await Toren.uploadAll(files, (file) =>
        note.replaceChildren("Uploading " + file.name + "…"));
      const body = { agent: agent.value, input: input.value };
      if (stored.length) body.files = stored.map((file) => file.id);
      note.replaceChildren("Starting…");
      const created = await api("POST", "/runs", body);
      location.hash = "#/runs/" + encodeURIComponent(created.id);
    } catch (error) {
      start.disabled = false;
      note.replaceChildren();
      Toren.showError(note, error);
    }
  });
  return form;
}

// How long a run took (finished) or has taken so far: "850 ms", "12.3 s", "4 min 05 s",
// "3 h 12 min".
function runDuration(run, now) {
  if (!run.created_at) return "";
  const end = run.finished_at ? new Date(run.finished_at) : now;
  const ms = Math.max(0, end - new Date(run.created_at));
  const text = ms < 1000 ? Math.round(ms) + " ms" : ms < 60000 ? (ms / 1000).toFixed(1) + " s" :
    ms < 3600000 ? Math.floor(ms / 60000) + " min " +
      String(Math.floor(ms / 1000) % 60).padStart(2, "0") + " s" :
      Math.floor(ms / 3600000) + " h " + String(Math.floor(ms / 60000) % 60).padStart(2, "0") +
      " min";
  return run.finished_at ? text : text + " so far";
}

// The columns the API sorts by (GET /runs?sort=), with the order a first click asks for.
const SORTABLE = { Created: ["created", "-"], Duration: ["duration", "-"],
  Cost: ["cost", "-"], "Model calls": ["model_calls", "-"], Steps: ["steps", "-"] };
const FILTERS = ["agent", "status", "kind", "schedule", "q", "version", "since", "until", "sort"];

Toren.page({
  id: "runs",
  title: "Runs",
  nav: true,
  order: 10,
  path: /^\/runs\/?(?:\?(.*))?$/,
  async render(root, [query], ctx) {
    const { el, api } = Toren;
    const params = new URLSearchParams(query || "");
    const agents = (await api("GET", "/agents")).agents.map((a) => a.name);
    // The schedules' names (GET /schedules), for the filter; none when schedules are not served.
    const schedules = await api("GET", "/schedules").then(
      (data) => [...new Set(data.schedules.map((s) => s.name))].sort(), () => []);
    if (params.get("schedule") && !schedules.includes(params.get("schedule"))) {
      schedules.push(params.get("schedule"));
    }
    const select = (name, values) => el("select", { name, id: "filter-" + name,
      "aria-label": name[0].toUpperCase() + name.slice(1) },
      el("option", { value: "" }, "any " + name),
      values.map((v) => el("option", { value: v, selected: params.get(name) === v }, v)));
    const field = (name, attrs) => el("input", { name, id: "filter-" + name,
      value: params.get(name) || "", ...attrs });
    const form = el("form", { class: "filters", id: "run-filters", role: "search" },
      field("q", { type: "search", placeholder: "Words in the input or output",
        "aria-label": "Words in the input or output", maxlength: 500, size: 28 }),
      select("agent", agents),
      select("status", ["queued", "running", "awaiting_input", "awaiting_approval", "waiting",
        "completed", "stopped", "failed", "cancelled"]),
      select("kind", ["run", "session"]),
      schedules.length ? select("schedule", schedules) : null,
      field("version", { placeholder: "version", "aria-label": "Agent version (hash or " +
        "version:)", size: 10, pattern: "[A-Za-z0-9][A-Za-z0-9._+\\-]{0,63}" }),
      el("label", {}, "from ", field("since", { type: "date" })),
      el("label", {}, "to ", field("until", { type: "date" })),
      el("button", { type: "submit", id: "apply-filters" }, "Find"),
      params.toString() && [...params.keys()].some((k) => k !== "limit")
        ? el("a", { href: "#/runs", id: "clear-filters" }, "Clear") : null);
    // a new view: the form's filters, this sort and page size, back to the first page
    const apply = () => {
      const chosen = new URLSearchParams();
      for (const [name, value] of new FormData(form)) if (value) chosen.set(name, value);
      for (const name of ["sort", "limit"]) if (params.get(name)) chosen.set(name, params.get(name));
      location.hash = "#/runs" + (chosen.toString() ? "?" + chosen : "");
    };
    form.addEventListener("change", (event) => {
      if (event.target.name !== "q" && event.target.name !== "version") apply();
    });
    form.addEventListener("submit", (event) => { event.preventDefault(); apply(); });
    const body = el("tbody", { id: "runs-body" });
    const pager = el("nav", { class: "pager", id: "runs-pager", "aria-label": "Pages" });
    // a link to this view with other settings (the filters kept)
    const view = (changes) => {
      const next = new URLSearchParams(params);
      for (const [name, value] of Object.entries(changes)) {
        if (value) next.set(name, value); else next.delete(name);
      }
      return "#/runs" + (next.toString() ? "?" + next : "");
    };
    const sort = params.get("sort") || "-created";
    // a column heading: a button that sorts by it (again: the other way), aria-sort on it
    const heading = (label) => {
      if (!SORTABLE[label]) return el("th", { scope: "col" }, label);
      const [key, first] = SORTABLE[label];
      const current = sort.replace(/^-/, "") === key ? (sort.startsWith("-") ? "-" : "+") : "";
      const next = current === "-" ? key : current === "+" ? "-" + key : first + key;
      return el("th", { scope: "col", "aria-sort": current === "-" ? "descending" :
        current === "+" ? "ascending" : null, class: "sortable" },
        el("a", { href: view({ sort: next === "-created" ? "" : next, cursor: "" }),
          "data-sort": key, title: "Sort by " + label.toLowerCase() },
          label, current ? (current === "-" ? " \u25BC" : " \u25B2") : ""));
    };
    root.append(el("h1", {}, "Runs"), startRunForm(agents), form,
      el("table", { class: "list" },
        el("thead", {}, el("tr", {}, ["Run", "Agent", "Version", "Kind", "Schedule", "Status",
          "Created", "Duration", "Model calls", "Steps", "Cost", "Output"].map(heading))),
        body), pager);
    // the page: its size (limit, 1 to 200) and where it starts (the cursor GET /runs gave)
    const limit = Math.min(200, Math.max(1, Number(params.get("limit")) || 50));
    const searched = ["q", "version", "since", "until"].some((name) => params.get(name));
    async function refresh() {
      const search = new URLSearchParams({ limit: String(limit) });
      for (const name of [...FILTERS, "cursor"]) {
        if (params.get(name)) search.set(name, params.get(name));
      }
      const { runs, next_cursor: more } = await api("GET", "/runs?" + search);
      const now = new Date();
      pager.replaceChildren(
        params.get("cursor") ? el("a", { id: "newest-runs", href: view({ cursor: "" }) },
          sort === "-created" ? "\u2190 Newest runs" : "\u2190 First page") : "",
        more ? el("a", { id: "older-runs", href: view({ cursor: more }) },
          sort === "-created" ? "Older runs \u2192" : "Next page \u2192") : "");
      body.replaceChildren(...runs.map((run) => el("tr", { "data-run": run.id },
        el("td", {}, el("a", { href: (run.kind === "session" ? "#/sessions/" : "#/runs/") +
          encodeURIComponent(run.id) }, run.id.slice(0, 8))),
        el("td", {}, run.agent),
        el("td", { class: "version" }, run.agent_human_version ||
          (run.agent_version ? run.agent_version.slice(0, 12) : "")),
        el("td", {}, run.kind),
        el("td", { class: "schedule" }, run.schedule || ""),
        el("td", {}, Toren.status(run.status)), el("td", {}, Toren.when(run.created_at)),
        el("td", { class: "duration" }, runDuration(run, now)),
        el("td", { class: "model-calls num" }, String(run.totals.model_calls)),
        el("td", { class: "steps num" }, String(run.totals.steps)),
        el("td", { class: "cost num", title: run.totals.cost_unknown_calls ?
          run.totals.cost_unknown_calls + " call(s) of unknown price not included" : null },
          Toren.money(run.totals.cost_usd) + (run.totals.cost_unknown_calls ? " +?" : "")),
        el("td", { class: "clip" }, run.output === null ? "" :
          String(typeof run.output === "string" ? run.output : JSON.stringify(run.output))
            .slice(0, 120)))));
      if (!runs.length) body.append(el("tr", {}, el("td", { colspan: 12, class: "muted" },
        params.get("cursor") ? "No more runs." : searched ? "No runs match." : "No runs yet.")));
    }
    await refresh();
    Toren.every(2000, () => refresh().catch(() => {}), ctx);
  },
});
