// Runs: start a run (an input and files to attach), and the newest runs with filters (agent,
// status, kind, schedule), refreshed every two seconds.
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
    const select = (name, values) => el("select", { name, id: "filter-" + name },
      el("option", { value: "" }, "any " + name),
      values.map((v) => el("option", { value: v, selected: params.get(name) === v }, v)));
    const form = el("form", { class: "filters", id: "run-filters" },
      select("agent", agents),
      select("status", ["queued", "running", "awaiting_input", "awaiting_approval", "waiting",
        "completed", "stopped", "failed", "cancelled"]),
      select("kind", ["run", "session"]),
      schedules.length ? select("schedule", schedules) : null);
    form.addEventListener("change", () => {
      const chosen = new URLSearchParams();
      for (const [name, value] of new FormData(form)) if (value) chosen.set(name, value);
      location.hash = "#/runs" + (chosen.toString() ? "?" + chosen : "");
    });
    const body = el("tbody", { id: "runs-body" });
    root.append(el("h1", {}, "Runs"), startRunForm(agents), form,
      el("table", { class: "list" },
        el("thead", {}, el("tr", {}, ["Run", "Agent", "Kind", "Schedule", "Status", "Created",
          "Output"]
          .map((h) => el("th", {}, h)))),
        body));
    async function refresh() {
      const search = new URLSearchParams({ limit: "50" });
      for (const name of ["agent", "status", "kind", "schedule"]) {
        if (params.get(name)) search.set(name, params.get(name));
      }
      const { runs } = await api("GET", "/runs?" + search);
      body.replaceChildren(...runs.map((run) => el("tr", { "data-run": run.id },
        el("td", {}, el("a", { href: (run.kind === "session" ? "#/sessions/" : "#/runs/") +
          encodeURIComponent(run.id) }, run.id.slice(0, 8))),
        el("td", {}, run.agent), el("td", {}, run.kind),
        el("td", { class: "schedule" }, run.schedule || ""),
        el("td", {}, Toren.status(run.status)), el("td", {}, Toren.when(run.created_at)),
        el("td", { class: "clip" }, run.output === null ? "" :
          String(typeof run.output === "string" ? run.output : JSON.stringify(run.output))
            .slice(0, 120)))));
      if (!runs.length) body.append(el("tr", {}, el("td", { colspan: 7, class: "muted" },
        "No runs yet.")));
    }
    await refresh();
    Toren.every(2000, () => refresh().catch(() => {}), ctx);
  },
});
