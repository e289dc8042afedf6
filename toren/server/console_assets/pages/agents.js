// Agents: every agent served here with the versions of its definition the deployment keeps
// (GET /agents/{name}/versions), newest first: which one is served now, when each was first
// seen, and how many runs (and unfinished runs) are pinned to it; refreshed every five seconds.
"use strict";

Toren.page({
  id: "agents",
  title: "Agents",
  nav: true,
  order: 80,
  path: /^\/agents\/?$/,
  async render(root, _params, ctx) {
    const { el, api } = Toren;
    const list = el("div", { id: "agents-list" });
    root.append(el("h1", {}, "Agents"),
      el("p", { class: "muted" }, "A run stays on the version of its agent it started with; " +
        "Upgrade on an unfinished run's page moves it to the version served now."), list);

    function label(version) {
      return version.human_version ? version.human_version + " (" + version.hash.slice(0, 12) +
        ")" : version.hash.slice(0, 12);
    }

    async function refresh() {
      const { agents } = await api("GET", "/agents");
      const sections = await Promise.all(agents.map(async (agent) => {
        const found = await api("GET", "/agents/" + encodeURIComponent(agent.name) +
          "/versions");
        const rows = found.versions.map((version) => el("tr", {
          "data-version": version.hash, class: version.current ? "current" : "" },
          el("td", { class: "version" }, label(version),
            version.current ? el("strong", { class: "served" }, " · served now") : ""),
          el("td", {}, Toren.when(version.first_seen)),
          el("td", { class: "runs" }, String(version.runs)),
          el("td", { class: "active" }, String(version.active_runs)),
          el("td", {}, el("a", { href: "#/runs?" + new URLSearchParams({ agent: agent.name }) },
            "runs"))));
        return el("section", { "data-agent": agent.name },
          el("h2", {}, agent.name),
          el("table", { class: "list" },
            el("thead", {}, el("tr", {}, ["Version", "First seen", "Runs", "Unfinished", ""]
              .map((h) => el("th", {}, h)))),
            el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: 5,
              class: "muted" }, "No version kept yet.")))));
      }));
      list.replaceChildren(...sections);
    }
    await refresh();
    Toren.every(5000, () => refresh().catch(() => {}), ctx);
  },
});
