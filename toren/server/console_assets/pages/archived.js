// Archived: the runs retention moved out of the hot tables (GET /archived-runs), newest first,
// filtered by agent, each with what its archive summary says; a run reads as before through its
// link, and **Restore** puts it back into the hot tables (POST /runs/{id}/restore).
"use strict";

Toren.page({
  id: "archived",
  title: "Archived",
  nav: true,
  order: 15,
  path: /^\/archived\/?(?:\?(.*))?$/,
  async render(root, [query], ctx) {
    const { el, api } = Toren;
    const params = new URLSearchParams(query || "");
    const agents = (await api("GET", "/agents")).agents.map((a) => a.name);
    const form = el("form", { class: "filters", id: "archived-filters" },
      el("select", { name: "agent", id: "archived-agent" },
        el("option", { value: "" }, "any agent"),
        agents.map((v) => el("option", { value: v, selected: params.get("agent") === v }, v))));
    form.addEventListener("change", () => {
      const agent = new FormData(form).get("agent");
      location.hash = "#/archived" + (agent ? "?agent=" + encodeURIComponent(agent) : "");
    });
    const body = el("tbody", { id: "archived-body" });
    const notes = el("div", { id: "archived-notes" });
    root.append(el("h1", {}, "Archived runs"),
      el("p", { class: "muted" }, "Finished runs older than their agent's retention, moved to " +
        "the archive (toren db archive). Each reads as it did; Restore puts it back into the " +
        "hot tables, and the next archive pass takes it again while it is past its retention."),
      form, notes,
      el("table", { class: "list" },
        el("thead", {}, el("tr", {}, ["Run", "Agent", "Kind", "Status", "Finished", "Archived",
          "Events", "Cost", ""].map((h) => el("th", {}, h)))),
        body));

    async function restore(run, button) {
      button.disabled = true;
      try {
        await api("POST", "/runs/" + encodeURIComponent(run.id) + "/restore", {});
        notes.replaceChildren(el("p", { class: "notice", role: "status" },
          "Run " + run.id.slice(0, 8) + " is back in the hot tables. ",
          el("a", { href: "#/runs/" + encodeURIComponent(run.id) }, "Open it")));
      } catch (error) {
        notes.replaceChildren();
        Toren.showError(notes, error);
      }
      await refresh();
    }

    async function refresh() {
      const search = new URLSearchParams({ limit: "50" });
      if (params.get("agent")) search.set("agent", params.get("agent"));
      const { runs } = await api("GET", "/archived-runs?" + search);
      body.replaceChildren(...runs.map((run) => {
        const summary = run.archive.summary || {};
        const button = el("button", { type: "button", class: "restore" }, "Restore");
        button.addEventListener("click", () => restore(run, button));
        return el("tr", { "data-run": run.id },
          el("td", {}, el("a", { href: (run.kind === "session" ? "#/sessions/" : "#/runs/") +
            encodeURIComponent(run.id) }, run.id.slice(0, 8))),
          el("td", {}, run.agent), el("td", {}, run.kind),
          el("td", {}, Toren.status(run.status)), el("td", {}, Toren.when(run.finished_at)),
          el("td", {}, Toren.when(run.archive.archived_at)),
          el("td", { class: "events" }, String(summary.events ?? "")),
          el("td", {}, Toren.money(summary.cost_usd)),
          el("td", {}, button));
      }));
      if (!runs.length) body.append(el("tr", {}, el("td", { colspan: 9, class: "muted" },
        "No archived runs.")));
    }
    await refresh();
    Toren.every(5000, () => refresh().catch(() => {}), ctx);
  },
});
