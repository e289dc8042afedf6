// Two runs side by side (GET /runs/{a}/diff/{b}; a run and its fork, or any two runs): how
// each ended, the first step that differs (highlighted and scrolled to), and every task's
// steps in two columns, each with what it cost and how long its model call took, and the
// change from A to B. Everything from the runs (model text, tool arguments and results) is
// shown as text, folded when long.
"use strict";

Toren.page({
  id: "diff",
  section: "runs",
  title: "Compare runs",
  path: /^\/diff\/([0-9a-fA-F-]{36})\/([0-9a-fA-F-]{36})$/,
  async render(root, [runA, runB]) {
    const { el, api, money, folded } = Toren;
    const diff = await api("GET", "/runs/" + encodeURIComponent(runA) + "/diff/" +
      encodeURIComponent(runB));
    const WHAT = {
      model_output: "the model's output differs",
      tool_results: "the tool results differ",
      model: "the same output from another model",
      prompt: "the same output under another system prompt",
      only_in_a: "only run A made this step",
      only_in_b: "only run B made this step",
      outcome: "every step is alike, but the runs ended differently",
    };

    function runLink(side, outcome) {
      return el("div", { class: "diff-run", id: "diff-" + side },
        el("strong", {}, side.toUpperCase() + " "),
        el("a", { href: "#/runs/" + encodeURIComponent(outcome.id) }, outcome.id), " ",
        outcome.agent, " ", Toren.status(outcome.status),
        outcome.stop_reason ? " (" + outcome.stop_reason + ")" : "",
        el("div", { class: "diff-output" }, folded(outcome.output)));
    }

    const first = diff.first_difference;
    const summary = diff.identical ?
      el("p", { id: "diff-summary", class: "good" }, "Identical: no step differs and both " +
        "runs ended alike.") :
      el("p", { id: "diff-summary", class: "warn" }, "First difference: " +
        (first.task_id ? "task " + first.task_id + ", step " + first.step + ": " : "") +
        (WHAT[first.differs] || first.differs));
    root.append(el("h1", {}, "Compare runs"),
      el("div", { class: "diff-runs" }, runLink("a", diff.a), runLink("b", diff.b)),
      summary, totals(diff));

    for (const task of diff.tasks) {
      const body = el("tbody");
      for (const row of task.steps) {
        const isFirst = first && first.task_id === task.task_id && first.step === row.step;
        body.append(el("tr", { class: "diff-step" + (row.same ? "" : " differs") +
            (isFirst ? " first" : ""), "data-step": row.step, "data-task": task.task_id,
          id: isFirst ? "first-difference" : null },
          el("th", { scope: "row" }, String(row.step),
            row.same ? "" : el("div", { class: "differs-what" }, WHAT[row.differs] ||
              row.differs)),
          el("td", { class: "side-a" }, side(row.a)),
          el("td", { class: "side-b" }, side(row.b)),
          el("td", { class: "delta" }, delta(row.a, row.b))));
      }
      root.append(el("h2", {}, "Task " + task.task_id),
        el("table", { class: "list diff" },
          el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "Step"),
            el("th", { scope: "col" }, "A"), el("th", { scope: "col" }, "B"),
            el("th", { scope: "col" }, "B \u2212 A"))),
          body));
    }
    const target = document.getElementById("first-difference");
    if (target) target.scrollIntoView({ block: "center" });

    // One side of a step: its model, the model's text and tool calls, their results.
    function side(step) {
      if (!step) return el("span", { class: "muted" }, "(no such step)");
      return el("div", { class: "diff-side" },
        el("div", { class: "step-meta" }, step.model +
          (step.copied ? " \u00b7 copied from the source, at no cost" : "") + " \u00b7 " +
          step.input_tokens + " in / " + step.output_tokens + " out tokens \u00b7 " +
          money(step.cost_usd) + " \u00b7 " + Math.round(step.latency_ms) + " ms"),
        step.text ? el("div", { class: "model-text" }, folded(step.text)) : "",
        ...step.tool_calls.map((call) => el("div", { class: "tool-call" },
          el("strong", {}, call.name), " ", folded(call.arguments))),
        ...step.tool_results.map((result) => el("div", { class: "tool-result" +
            (result.is_error ? " error" : "") }, result.name + " \u2192 ",
          folded(result.output))));
    }

    // What B's step cost and took beside A's: the deltas, signed.
    function delta(a, b) {
      if (!a || !b) return "";
      const unknown = a.cost_usd === null || b.cost_usd === null;
      const cost = unknown ? 0 : b.cost_usd - a.cost_usd;
      const ms = Math.round(b.latency_ms - a.latency_ms);
      return el("div", {},
        el("div", { class: "delta-cost " + sign(cost) }, unknown ? "cost unknown" :
          signed(cost, money(Math.abs(cost)))),
        el("div", { class: "delta-ms " + sign(ms) }, signed(ms, Math.abs(ms) + " ms")));
    }

    // Costs are compared to the CLI's four decimals, times to the millisecond.
    function sign(value) {
      const shown = Math.abs(value) < 0.00005 ? 0 : value;
      return shown > 0 ? "more" : shown < 0 ? "less" : "same";
    }
    function signed(value, text) {
      const which = sign(value);
      return (which === "more" ? "+" : which === "less" ? "\u2212" : "\u00b1") + text;
    }

    // Both runs' cost and model time over every step, and the change.
    function totals(found) {
      const sum = (key, which) => found.tasks.reduce((total, task) => total +
        task.steps.reduce((n, row) => n + ((row[which] && row[which][key]) || 0), 0), 0);
      const costA = sum("cost_usd", "a"), costB = sum("cost_usd", "b");
      const msA = sum("latency_ms", "a"), msB = sum("latency_ms", "b");
      return el("dl", { class: "facts", id: "diff-totals" },
        el("dt", {}, "Cost"), el("dd", {}, "A " + money(costA) + " \u00b7 B " + money(costB) +
          " (" + signed(costB - costA, money(Math.abs(costB - costA))) + ")"),
        el("dt", {}, "Model time"), el("dd", {}, "A " + Math.round(msA) + " ms \u00b7 B " +
          Math.round(msB) + " ms (" + signed(Math.round(msB - msA),
            Math.abs(Math.round(msB - msA)) + " ms") + ")"));
    }
  },
});
