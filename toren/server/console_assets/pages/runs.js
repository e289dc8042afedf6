// Runs: the newest runs with filters (agent, status, kind, schedule), refreshed every two seconds.
"use strict";

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
      select("status", ["queued", "running", "awaiting_input", "completed", "stopped",
        "failed", "cancelled"]),
      select("kind", ["run", "session"]),
      schedules.length ? select("schedule", schedules) : null);
    form.addEventListener("change", () => {
      const chosen = new URLSearchParams();
      for (const [name, value] of new FormData(form)) if (value) chosen.set(name, value);
      location.hash = "#/runs" + (chosen.toString() ? "?" + chosen : "");
    });
    const body = el("tbody", { id: "runs-body" });
    root.append(el("h1", {}, "Runs"), form,
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
