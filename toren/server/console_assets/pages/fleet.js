// Fleet: the live workers, their versions (a version other than the server's is
// highlighted) and lanes, what waits that no live worker serves, the queue's depth per agent, and the schedules (state, next slot, last fired)
// with pause and resume; refreshed every three seconds.
"use strict";

Toren.page({
  id: "fleet",
  title: "Fleet",
  nav: true,
  order: 90,
  path: /^\/fleet\/?$/,
  async render(root, _params, ctx) {
    const { el, api } = Toren;
    const summary = el("div", { id: "fleet-summary" });
    const workers = el("tbody", { id: "workers-body" });
    const queue = el("tbody", { id: "queue-body" });
    const lanes = el("div", { id: "fleet-unserved" });
    const schedules = el("tbody", { id: "schedules-body" });
    const schedulesSection = el("section", { id: "schedules", hidden: true },
      el("h2", {}, "Schedules"),
      el("table", { class: "list" }, el("thead", {}, el("tr", {},
        ["Agent", "Schedule", "Cron", "State", "Next slot", "Last fired", "Runs", ""]
          .map((h) => el("th", {}, h)))), schedules));

    // Pause or resume one schedule (POST /schedules/{agent}/{name}/pause|resume), then show
    // the table again; a refusal is shown under the table.
    async function toggle(schedule, action) {
      try {
        await api("POST", "/schedules/" + encodeURIComponent(schedule.agent) + "/" +
          encodeURIComponent(schedule.name) + "/" + action, {});
      } catch (error) {
        Toren.showError(schedulesSection, error);
      }
      await refreshSchedules();
    }

    async function refreshSchedules() {
      let listed;
      try {
        listed = (await api("GET", "/schedules")).schedules;
      } catch (error) {
        if (error instanceof Toren.ApiError && error.status === 404) return;  // not served
        throw error;
      }
      schedulesSection.hidden = listed.length === 0;
      schedules.replaceChildren(...listed.map((s) => el("tr", {
        "data-schedule": s.agent + "/" + s.name },
      el("td", {}, s.agent), el("td", {}, s.name),
      el("td", {}, el("code", {}, s.cron), " " + s.timezone),
      el("td", { class: "schedule-state" }, Toren.status(s.state)),
      el("td", { class: "next-slot" }, s.next_fire_at ? Toren.when(s.next_fire_at) : "—"),
      el("td", { class: "last-fired" }, s.last_fired_at ? Toren.when(s.last_fired_at) : "never"),
      el("td", {}, el("a", { href: "#/runs?" + new URLSearchParams({ agent: s.agent,
        schedule: s.name }) }, "runs")),
      el("td", {}, s.state === "removed" ? "" : el("button", {
        type: "button", class: "schedule-" + (s.state === "paused" ? "resume" : "pause"),
        onclick: () => toggle(s, s.state === "paused" ? "resume" : "pause") },
      s.state === "paused" ? "Resume" : "Pause")))));
    }
    root.append(el("h1", {}, "Fleet"), summary, lanes,
      el("h2", {}, "Workers"),
      el("table", { class: "list" }, el("thead", {}, el("tr", {},
        ["Worker", "Version", "Lane", "Host", "PID", "Agents", "Started", "Last heartbeat"]
          .map((h) => el("th", {}, h)))), workers),
      el("h2", {}, "Queue"),
      el("table", { class: "list" }, el("thead", {}, el("tr", {},
        ["Agent", "Ready", "In flight", "Delayed", "Waiting for a slot"]
          .map((h) => el("th", {}, h)))), queue),
      schedulesSection);
    async function refresh() {
      let health;
      try {
        health = await api("GET", "/healthz");
      } catch (error) {
        if (!(error instanceof Toren.ApiError) || error.status !== 503) throw error;
        health = { status: "degraded" };
      }
      if (health.version === undefined) {
        summary.replaceChildren(el("p", { class: "muted" }, "Enter an API key to see the fleet."));
        return;
      }
      const versions = health.versions || [];
      summary.replaceChildren(el("p", {}, "Server ", el("code", {}, health.version), " · ",
        Toren.status(health.status), " · database ",
        health.database && health.database.reachable ? "reachable" : "unreachable"),
      health.version_skew ? el("p", { class: "warn", id: "version-skew", role: "status" },
        "Version skew: workers run " + versions.join(", ")) : "");
      workers.replaceChildren(...(health.workers || []).map((w) => el("tr", {
        class: w.version !== health.version || health.version_skew ? "skew" : "" },
      el("td", {}, w.id), el("td", { class: "version" }, w.version),
      el("td", { class: "lane" }, w.lane || "all"), el("td", {}, w.hostname),
      el("td", {}, String(w.pid)), el("td", {}, w.agents.join(", ")),
      el("td", {}, Toren.when(w.started_at)), el("td", {}, Toren.when(w.last_heartbeat)))));
      if (!(health.workers || []).length) {
        workers.append(el("tr", {}, el("td", { colspan: 8, class: "muted" }, "No live workers.")));
      }
      // work no live worker serves (a runtime: long agent with no long-lane worker alive)
      let unserved = [];
      try {
        unserved = (await api("GET", "/fleet")).unserved || [];
      } catch (_error) { /* a key without the fleet view: the rest of the page still shows */ }
      lanes.replaceChildren(...unserved.map((u) => el("p", { class: "warn", role: "status",
        "data-agent": u.agent }, u.message)));
      queue.replaceChildren(...Object.entries(health.queue || {}).map(([agent, depth]) =>
        el("tr", {}, el("td", {}, agent), el("td", {}, String(depth.ready)),
          el("td", {}, String(depth.in_flight)), el("td", {}, String(depth.delayed)),
          // ready messages held back by the agent's concurrency: limit (Postgres queue)
          el("td", {}, String(depth.waiting_concurrency ?? 0)))));
    }
    await refresh();
    await refreshSchedules();
    Toren.every(3000, () => refresh().then(refreshSchedules).catch(() => {}), ctx);
  },
});
