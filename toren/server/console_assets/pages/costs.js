// Costs: what the agents' model calls cost per day or week (GET /costs), as a stacked bar
// chart by agent or by model with its figures in a table beside it (for screen readers, and
// for anyone who would rather read), a table per agent and model (calls, tokens, cost), and
// each agent's budgets with today's use as meters. The URL holds the period, the range, the
// agent and what the bars are stacked by, so a view can be shared.
"use strict";

(() => {
  const SVG = "http://www.w3.org/2000/svg";
  // Series colours: each at least 3:1 against the white background (WCAG's contrast for
  // graphics), told apart by hue and, for the colour-blind, by the legend's order.
  const COLOURS = ["#2457c5", "#c2410c", "#067647", "#7c3aed", "#b42318", "#0e7490",
    "#a15c07", "#4b5563"];
  const WIDTH = 960;
  const HEIGHT = 260;
  const PAD = { left: 72, right: 12, top: 12, bottom: 40 };

  // An SVG element: attributes set as attributes (never style="" text: the CSP has no
  // 'unsafe-inline'), children as nodes or text.
  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG, tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value !== undefined && value !== null) node.setAttribute(name, String(value));
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  // "2026-12-03" for a day, "week of 2026-11-30" for a week (UTC, as the API cuts them).
  function periodLabel(start, period) {
    const day = String(start).slice(0, 10);
    return period === "week" ? "week of " + day : day;
  }

  function count(value) { return Number(value || 0).toLocaleString("en-US"); }

  // A round step for the value axis: 1, 2 or 5 times a power of ten, about four ticks.
  function niceStep(max) {
    const raw = max / 4;
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    return [1, 2, 5, 10].map((f) => f * power).find((s) => s >= raw) || raw;
  }

  // The stacked bars: one bar per period, a segment per series (agent or model), each with
  // a <title> (shown on hover); the figures are in the table after it.
  function chart(report, series, seriesOf, colourOf) {
    const { money } = Toren;
    const buckets = report.buckets;
    const max = Math.max(0, ...buckets.map((b) => b.cost_usd));
    const step = max > 0 ? niceStep(max) : 0.01;
    const top = Math.max(step, Math.ceil(max / step) * step);
    const plotW = WIDTH - PAD.left - PAD.right;
    const plotH = HEIGHT - PAD.top - PAD.bottom;
    const slot = plotW / Math.max(1, buckets.length);
    const barW = Math.max(1, Math.min(48, slot * 0.7));
    const y = (value) => PAD.top + plotH - (value / top) * plotH;
    const unit = report.period === "week" ? "week" : "day";
    const busiest = buckets.reduce((a, b) => (b.cost_usd > (a ? a.cost_usd : -1) ? b : a),
      null);
    const summary = "Cost per " + unit + ", " + buckets.length + " " + unit + "s from " +
      report.since.slice(0, 10) + ": " + money(report.totals.cost_usd) + " in all" +
      (busiest && busiest.cost_usd > 0 ? "; the most, " + money(busiest.cost_usd) + ", on the " +
        periodLabel(busiest.start, report.period) : "") + ". The table below lists each " +
      unit + ".";
    const root = svg("svg", { id: "costs-chart", viewBox: "0 0 " + WIDTH + " " + HEIGHT,
      role: "img", "aria-labelledby": "costs-chart-title costs-chart-desc",
      preserveAspectRatio: "xMinYMin meet", class: "costs-chart" },
    svg("title", { id: "costs-chart-title" }, "Cost per " + unit + " by " +
      (seriesOf === "model" ? "model" : "agent")),
    svg("desc", { id: "costs-chart-desc" }, summary));
    for (let tick = 0; tick <= top + step / 2; tick += step) {
      root.append(svg("line", { x1: PAD.left, x2: WIDTH - PAD.right, y1: y(tick), y2: y(tick),
        class: tick === 0 ? "axis" : "grid" }),
      svg("text", { x: PAD.left - 6, y: y(tick) + 4, "text-anchor": "end", class: "tick" },
        money(tick)));
    }
    const labelEvery = Math.ceil(buckets.length / 12);
    buckets.forEach((bucket, index) => {
      const x = PAD.left + index * slot + (slot - barW) / 2;
      const bar = svg("g", { class: "bar", "data-start": bucket.start });
      let base = 0;
      for (const name of series) {
        const value = bucket.costs.filter((c) => c[seriesOf] === name)
          .reduce((sum, c) => sum + c.cost_usd, 0);
        if (value <= 0) continue;
        const calls = bucket.costs.filter((c) => c[seriesOf] === name)
          .reduce((sum, c) => sum + c.calls, 0);
        bar.append(svg("rect", { x, width: barW, y: y(base + value),
          height: Math.max(0.5, y(base) - y(base + value)), fill: colourOf(name),
          class: "segment", "data-series": name },
        svg("title", {}, periodLabel(bucket.start, report.period) + " · " + name + ": " +
          money(value) + " (" + count(calls) + " calls)")));
        base += value;
      }
      root.append(bar);
      if (index % labelEvery === 0) {
        root.append(svg("text", { x: x + barW / 2, y: HEIGHT - PAD.bottom + 16,
          "text-anchor": "middle", class: "tick" },
        String(bucket.start).slice(5, 10)));
      }
    });
    return root;
  }

  function legend(series, colourOf) {
    const { el } = Toren;
    return el("ul", { class: "costs-legend", id: "costs-legend", "aria-label": "Legend" },
      series.map((name) => {
        const swatch = el("span", { class: "swatch", "aria-hidden": "true" });
        swatch.style.backgroundColor = colourOf(name);  // CSSOM: allowed by the CSP
        return el("li", { "data-series": name }, swatch, name);
      }));
  }

  // Every period's figures, per series: the chart's data as text.
  function periodTable(report, series, seriesOf) {
    const { el, money } = Toren;
    const unit = report.period === "week" ? "Week" : "Day";
    return el("details", { class: "costs-figures", id: "costs-figures" },
      el("summary", {}, "The chart's figures, " + (unit === "Week" ? "week" : "day") +
        " by " + (unit === "Week" ? "week" : "day")),
      el("table", { class: "list", id: "costs-periods" },
        el("caption", { class: "muted" }, "Cost per " + unit.toLowerCase() + " by " +
          seriesOf + " (UTC)"),
        el("thead", {}, el("tr", {}, el("th", { scope: "col" }, unit),
          series.map((name) => el("th", { scope: "col" }, name)),
          el("th", { scope: "col" }, "Calls"), el("th", { scope: "col" }, "Total"))),
        el("tbody", {}, report.buckets.map((bucket) => el("tr", {
          "data-start": bucket.start },
        el("th", { scope: "row" }, periodLabel(bucket.start, report.period)),
        series.map((name) => el("td", { class: "num" }, money(bucket.costs
          .filter((c) => c[seriesOf] === name).reduce((sum, c) => sum + c.cost_usd, 0)))),
        el("td", { class: "num" }, count(bucket.calls)),
        el("td", { class: "num" }, money(bucket.cost_usd)))))));
  }

  // Calls, tokens and cost per agent and model, with each agent's total.
  function modelTable(report) {
    const { el, money } = Toren;
    const cost = (f) => money(f.cost_usd) + (f.unknown_cost_calls ?
      " + " + count(f.unknown_cost_calls) + " without a price" : "");
    const rows = [];
    for (const agent of report.agents) {
      if (!agent.calls) continue;
      agent.models.forEach((m, index) => rows.push(el("tr", {
        "data-agent": agent.agent, "data-model": m.model },
      index === 0 ? el("th", { scope: "rowgroup", rowspan: agent.models.length + 1 },
        agent.agent) : null,
      el("td", {}, m.model), el("td", { class: "num" }, count(m.calls)),
      el("td", { class: "num" }, count(m.input_tokens)),
      el("td", { class: "num" }, count(m.output_tokens)),
      el("td", { class: "num cost" }, cost(m)))));
      rows.push(el("tr", { class: "subtotal", "data-agent": agent.agent, "data-total": "" },
        el("td", {}, "all models"), el("td", { class: "num" }, count(agent.calls)),
        el("td", { class: "num" }, count(agent.input_tokens)),
        el("td", { class: "num" }, count(agent.output_tokens)),
        el("td", { class: "num cost" }, cost(agent))));
    }
    if (!rows.length) {
      rows.push(el("tr", {}, el("td", { colspan: 6, class: "muted" },
        "No model calls in this range.")));
    }
    return el("table", { class: "list", id: "costs-models" },
      el("thead", {}, el("tr", {}, ["Agent", "Model", "Calls", "Input tokens",
        "Output tokens", "Cost"].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, rows));
  }

  // Each agent's budgets: today's spend against the daily budget as a meter (past 80%
  // warned, as the ledger warns), and the per-run limit.
  function budgets(report) {
    const { el, money } = Toren;
    const items = report.budgets.map((b) => {
      const parts = [el("strong", {}, b.agent)];
      if (b.daily_budget_usd !== null && b.today) {
        const spent = b.today.spent_usd;
        const share = b.daily_budget_usd > 0 ? spent / b.daily_budget_usd : 1;
        const id = "budget-meter-" + report.budgets.indexOf(b);
        parts.push(el("label", { for: id, class: "budget-label" }, "Today (" + b.today.day +
          ", UTC): " + money(spent) + " of " + money(b.daily_budget_usd) + " daily budget (" +
          Math.round(share * 100) + "%)"),
        el("meter", { id, class: "budget-meter", min: 0, max: b.daily_budget_usd,
          value: Math.min(spent, b.daily_budget_usd), low: 0.8 * b.daily_budget_usd,
          high: 0.95 * b.daily_budget_usd, optimum: 0 }, money(spent)),
        share >= 0.8 ? el("span", { class: "warn" }, share >= 1 ? " no room left today" :
          " past 80%") : null);
      } else if (b.today) {
        parts.push(el("span", {}, "Today (" + b.today.day + ", UTC): " +
          money(b.today.spent_usd) + ", no daily budget"));
      } else {
        parts.push(el("span", { class: "muted" }, "no budget"));
      }
      parts.push(el("span", { class: "muted" }, b.run_budget_usd === null ? " · no limit per run" :
        " · at most " + money(b.run_budget_usd) + " per run"));
      return el("li", { "data-agent": b.agent }, parts);
    });
    return el("ul", { class: "budgets", id: "costs-budgets" }, items);
  }

  Toren.page({
    id: "costs",
    title: "Costs",
    nav: true,
    order: 70,
    path: /^\/costs\/?(?:\?(.*))?$/,
    async render(root, [query]) {
      const { el, api, money } = Toren;
      const params = new URLSearchParams(query || "");
      const agents = (await api("GET", "/agents")).agents.map((a) => a.name);
      const period = params.get("period") === "week" ? "week" : "day";
      const by = params.get("by") === "model" ? "model" : "agent";
      const search = new URLSearchParams({ period });
      for (const name of ["since", "until", "agent"]) {
        if (params.get(name)) search.set(name, params.get(name));
      }
      const choice = (name, label, values, chosen) => el("label", {}, label + " ",
        el("select", { name, id: "costs-" + name },
          values.map(([value, text]) => el("option", { value, selected: chosen === value },
            text))));
      const form = el("form", { class: "filters", id: "costs-filters" },
        choice("period", "Per", [["day", "day"], ["week", "week"]], period),
        el("label", {}, "From ", el("input", { type: "date", name: "since", id: "costs-since",
          value: params.get("since") || "" })),
        el("label", {}, "to ", el("input", { type: "date", name: "until", id: "costs-until",
          value: params.get("until") || "" })),
        choice("agent", "Agent", [["", "every agent"], ...agents.map((a) => [a, a])],
          params.get("agent") || ""),
        choice("by", "Stack by", [["agent", "agent"], ["model", "model"]], by));
      form.addEventListener("change", () => {
        const chosen = new URLSearchParams();
        for (const [name, value] of new FormData(form)) if (value) chosen.set(name, value);
        location.hash = "#/costs?" + chosen;
      });
      form.addEventListener("submit", (event) => event.preventDefault());
      root.append(el("h1", {}, "Costs"), form);
      let report;
      try {
        report = await api("GET", "/costs?" + search);
      } catch (error) {
        Toren.showError(root, error);
        return;
      }
      const totals = report.totals;
      const names = new Set();
      for (const bucket of report.buckets) for (const c of bucket.costs) names.add(c[by]);
      // the costliest first: the bottom of each bar, the first colour
      const spent = (name) => report.buckets.reduce((sum, b) => sum + b.costs
        .filter((c) => c[by] === name).reduce((s, c) => s + c.cost_usd, 0), 0);
      const series = [...names].sort((a, b) => spent(b) - spent(a) || (a < b ? -1 : 1));
      const colourOf = (name) => COLOURS[series.indexOf(name) % COLOURS.length];
      root.append(
        el("p", { id: "costs-summary" }, el("strong", {}, money(totals.cost_usd)), " for " +
          count(totals.calls) + " model calls (" + count(totals.input_tokens) +
          " input and " + count(totals.output_tokens) + " output tokens), " +
          report.since.slice(0, 10) + " to " + lastDay(report) + " (UTC)" +
          (totals.unknown_cost_calls ? "; " + count(totals.unknown_cost_calls) +
            " calls had no known price and are not in the cost" : "") + "."),
        el("figure", { class: "costs-figure" }, chart(report, series, by, colourOf),
          legend(series, colourOf)),
        periodTable(report, series, by),
        el("h2", {}, "Per agent and model"), modelTable(report),
        el("h2", {}, "Budgets"), budgets(report));
    },
  });

  // The last day the window holds (its end is excluded).
  function lastDay(report) {
    const end = new Date(report.until);
    end.setUTCDate(end.getUTCDate() - 1);
    return end.toISOString().slice(0, 10);
  }
})();
