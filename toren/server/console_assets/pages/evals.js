// Evals (docs/guides/evals.md): the list of evals (GET /evals), where two can be picked to
// compare; an eval's report (GET /evals/{id}): pass rate, cost and latency distributions, the
// graders' cost apart, per tag and per case (flaky cases marked, each run linked), refreshed
// while the eval runs; and the comparison of two (GET /evals/{a}/compare/{b}): pass rates,
// cost and latency side by side, and the cases fixed, broken and flaky. Case ids, failures and
// names are shown as text.
"use strict";

(() => {
  function percent(rate) { return (Number(rate || 0) * 100).toFixed(1) + "%"; }

  function seconds(value) { return Number(value || 0).toFixed(2) + " s"; }

  function versionOf(record) {
    return record.version.slice(0, 12) + (record.human_version ? " (" +
      record.human_version + ")" : "") + (record.model ? " with " + record.model : "");
  }

  function evalLink(record) {
    return Toren.el("a", { href: "#/evals/" + encodeURIComponent(record.id) },
      record.id.slice(0, 8));
  }

  // min, p50, p90, max of a distribution, formatted by ``show``.
  function spread(dist, show) {
    return "p50 " + show(dist.p50) + " \u00b7 p90 " + show(dist.p90) + " \u00b7 max " +
      show(dist.max) + " \u00b7 total " + show(dist.total);
  }

  Toren.page({
    id: "evals",
    title: "Evals",
    nav: true,
    order: 75,
    path: /^\/evals\/?$/,
    async render(root) {
      const { el, api, when } = Toren;
      const { evals } = await api("GET", "/evals?limit=200");
      root.append(el("h1", {}, "Evals"),
        el("p", { class: "muted" }, "A dataset run against one version of an agent, every " +
          "case a durable run. Start one with toren eval run; pick two to compare."));
      if (!evals.length) {
        root.append(el("p", { id: "evals-empty" }, "No evals yet."));
        return;
      }
      const compare = el("a", { id: "compare-evals", class: "button", "aria-disabled": "true" },
        "Compare the two picked");
      const picked = [];
      function pick(event) {
        const id = event.target.value;
        const at = picked.indexOf(id);
        if (event.target.checked && at < 0) picked.push(id);
        if (!event.target.checked && at >= 0) picked.splice(at, 1);
        while (picked.length > 2) {
          const dropped = picked.shift();
          root.querySelector("input[value='" + dropped + "']").checked = false;
        }
        if (picked.length === 2) {
          compare.href = "#/evals/" + picked.map(encodeURIComponent).join("/compare/");
          compare.removeAttribute("aria-disabled");
        } else {
          compare.removeAttribute("href");
          compare.setAttribute("aria-disabled", "true");
        }
      }
      const rows = evals.map((record) => el("tr", { "data-eval": record.id },
        el("td", {}, el("input", { type: "checkbox", value: record.id, onchange: pick,
          "aria-label": "Pick eval " + record.id.slice(0, 8) + " to compare" })),
        el("td", {}, evalLink(record)), el("td", {}, record.agent),
        el("td", {}, record.dataset.name + " (" + record.dataset.cases + " cases \u00d7 " +
          record.repeat + ")"),
        el("td", {}, versionOf(record)), el("td", {}, Toren.status(record.status)),
        el("td", {}, when(record.created_at))));
      root.append(el("table", { class: "list", id: "evals-list" },
        el("thead", {}, el("tr", {}, ...["", "Eval", "Agent", "Dataset", "Version", "Status",
          "Started"].map((name) => el("th", { scope: "col" }, name)))),
        el("tbody", {}, rows)), el("p", {}, compare));
    },
  });

  Toren.page({
    id: "eval",
    section: "evals",
    title: "Eval",
    path: /^\/evals\/([0-9a-fA-F-]{36})$/,
    async render(root, [evalId], ctx) {
      const { el, api, money, when } = Toren;
      const body = el("div", { id: "eval-report" });
      root.append(el("h1", {}, "Eval ", el("code", {}, evalId.slice(0, 8))), body);

      async function refresh() {
        const report = await api("GET", "/evals/" + encodeURIComponent(evalId));
        const record = report.eval;
        const totals = report.totals;
        const tags = Object.entries(report.tags).map(([tag, counts]) => el("tr", {},
          el("td", {}, tag), el("td", {}, percent(counts.pass_rate)),
          el("td", {}, counts.passed + " / " + counts.graded)));
        const cases = report.cases.map((item) => {
          const verdict = item.flaky ? "flaky" : !item.graded ? "pending" :
            item.passed === item.graded ? "passed" : "failed";
          return el("tr", { class: "case-" + verdict, "data-case": item.case_id },
            el("th", { scope: "row" }, item.case_id),
            el("td", {}, el("span", { class: "verdict verdict-" + verdict }, verdict), " " +
              item.passed + " / " + item.graded),
            el("td", {}, item.tags.join(", ")),
            el("td", {}, money(item.cost_usd)),
            el("td", {}, ...item.run_ids.filter(Boolean).map((runId, index) => [index ? " " : "",
              el("a", { href: "#/runs/" + encodeURIComponent(runId) }, runId.slice(0, 8))])),
            el("td", { class: "failures" }, item.failures.join("; ")));
        });
        body.replaceChildren(
          el("dl", { class: "facts", id: "eval-facts" },
            el("dt", {}, "Agent"), el("dd", {}, record.agent + " " + versionOf(record)),
            el("dt", {}, "Dataset"), el("dd", {}, record.dataset.name + " \u00b7 " +
              record.dataset.cases + " cases \u00d7 " + record.repeat + " \u00b7 hash " +
              record.dataset.hash.slice(0, 12)),
            el("dt", {}, "Status"), el("dd", {}, Toren.status(record.status),
              " started " + when(record.created_at) + (record.finished_at ? ", finished " +
                when(record.finished_at) : "")),
            el("dt", {}, "Pass rate"), el("dd", { id: "eval-pass-rate" },
              el("strong", {}, percent(totals.pass_rate)), " (" + totals.passed + " of " +
                totals.graded + " case runs; " + totals.flaky + " flaky)" +
                (totals.complete ? "" : " \u00b7 " + totals.graded + " of " +
                  totals.case_runs + " graded")),
            el("dt", {}, "Cost per run"), el("dd", { id: "eval-cost" },
              spread(report.cost_usd, money)),
            el("dt", {}, "Graders"), el("dd", {}, money(report.grader_cost_usd) +
              " (rubric models, apart from the runs)"),
            el("dt", {}, "Latency"), el("dd", {}, spread(report.latency_s, seconds))),
          tags.length ? el("h2", {}, "Tags") : "",
          tags.length ? el("table", { class: "list", id: "eval-tags" },
            el("thead", {}, el("tr", {}, ...["Tag", "Pass rate", "Passed"].map((name) =>
              el("th", { scope: "col" }, name)))), el("tbody", {}, tags)) : "",
          el("h2", {}, "Cases"),
          el("table", { class: "list", id: "eval-cases" },
            el("thead", {}, el("tr", {}, ...["Case", "Verdict", "Tags", "Cost", "Runs",
              "Failures"].map((name) => el("th", { scope: "col" }, name)))),
            el("tbody", {}, cases)));
        return record.status;
      }

      if (await refresh() === "running") {
        Toren.every(3000, () => refresh().catch((error) => Toren.showError(root, error)), ctx);
      }
    },
  });

  Toren.page({
    id: "eval-compare",
    section: "evals",
    title: "Compare evals",
    path: /^\/evals\/([0-9a-fA-F-]{36})\/compare\/([0-9a-fA-F-]{36})$/,
    async render(root, [evalA, evalB]) {
      const { el, api, money } = Toren;
      const found = await api("GET", "/evals/" + encodeURIComponent(evalA) + "/compare/" +
        encodeURIComponent(evalB));
      const rate = found.pass_rate;
      const changes = found.changes;
      const side = (name, record) => el("div", { class: "diff-run", id: "eval-" + name },
        el("strong", {}, name.toUpperCase() + " "), evalLink(record), " " + record.agent +
          " " + versionOf(record));
      const rows = found.cases.map((row) => el("tr", { class: "change-" + row.change,
        "data-case": row.case_id },
      el("th", { scope: "row" }, row.case_id),
      el("td", {}, el("span", { class: "verdict verdict-" + row.change }, row.change)),
      el("td", {}, row.a.passed + " / " + row.a.graded),
      el("td", {}, row.b.passed + " / " + row.b.graded),
      el("td", { class: "failures" }, row.b.failures.join("; "))));
      root.append(el("h1", {}, "Compare evals"),
        el("div", { class: "diff-runs" }, side("a", found.a), side("b", found.b)),
        found.same_dataset ? "" : el("p", { class: "warn", id: "datasets-differ" },
          "The datasets differ: only the cases both have are compared."),
        el("dl", { class: "facts", id: "compare-facts" },
          el("dt", {}, "Pass rate"), el("dd", { id: "compare-pass-rate" },
            percent(rate.a) + " \u2192 " + percent(rate.b) + " (" +
            (rate.delta >= 0 ? "+" : "\u2212") + percent(Math.abs(rate.delta)) + ")"),
          el("dt", {}, "Cost"), el("dd", {}, money(found.cost_usd.a.total) + " \u2192 " +
            money(found.cost_usd.b.total) + " (p50 per run " + money(found.cost_usd.a.p50) +
            " \u2192 " + money(found.cost_usd.b.p50) + ")"),
          el("dt", {}, "Latency p50"), el("dd", {}, seconds(found.latency_s.a.p50) +
            " \u2192 " + seconds(found.latency_s.b.p50)),
          el("dt", {}, "Cases"), el("dd", { id: "compare-changes" }, "fixed " + changes.fixed +
            " \u00b7 broken " + changes.broken + " \u00b7 flaky " + changes.flaky +
            " \u00b7 unchanged " + changes.same)),
        el("table", { class: "list", id: "compare-cases" },
          el("thead", {}, el("tr", {}, ...["Case", "Change", "A passed", "B passed",
            "B's failures"].map((name) => el("th", { scope: "col" }, name)))),
          el("tbody", {}, rows)),
        ...["a", "b"].filter((name) => found["only_in_" + name].length).map((name) =>
          el("p", { class: "muted" }, "Only in " + name.toUpperCase() + ": " +
            found["only_in_" + name].join(", "))));
    },
  });
})();
