// One run: its status, why it stopped, its agent version, totals and receipt figures, its tree
// built live from its event stream (with the model's text as it is generated), and the cancel
// and upgrade buttons.
"use strict";

Toren.page({
  id: "run",
  section: "runs",
  title: "Run",
  path: /^\/runs\/([0-9a-fA-F-]{36})$/,
  async render(root, [runId], ctx) {
    const { el, api, money } = Toren;
    const header = el("div", { class: "run-header", id: "run-header" });
    const tree = el("div", { class: "tree", id: "run-tree" });
    root.append(el("h1", {}, "Run ", el("code", {}, runId)), header,
      el("h2", {}, "Timeline"), tree);
    const terminal = ["completed", "stopped", "failed", "cancelled"];

    // The budget (limits.maxBudgetUsd, dailyBudgetUsd): spent of limit per scope, and what
    // calls in flight hold; nothing for an agent without a budget.
    function budgetFacts(budget) {
      if (!budget) return [];
      const facts = [];
      for (const [scope, label] of [["run", "Budget"], ["daily", "Daily budget"]]) {
        const spend = budget[scope];
        if (!spend || spend.budget_usd === null || spend.budget_usd === undefined) continue;
        facts.push(el("dt", {}, label), el("dd", { id: "budget-" + scope },
          money(spend.spent_usd) + " of " + money(spend.budget_usd) + " (" +
          money(spend.remaining_usd) + " left)"));
      }
      if (facts.length) {
        facts.push(el("dt", {}, "Held"), el("dd", { id: "budget-held" },
          money(budget.held_usd || 0) + " reserved by calls in flight" +
          (budget.expired_reservations ? " · " + budget.expired_reservations +
            " charged at their worst case after a crash" : "")));
      }
      return facts;
    }

    // The version of the run's agent served now (null when none is kept or the agent is
    // not served here).
    async function servedVersion(agent) {
      try {
        const found = await api("GET", "/agents/" + encodeURIComponent(agent) + "/versions");
        return found.versions.find((v) => v.current) || null;
      } catch (_) {
        return null;
      }
    }

    let served;
    async function refresh() {
      const run = await api("GET", "/runs/" + encodeURIComponent(runId));
      const t = run.totals;
      const cancel = el("button", { id: "cancel-run", type: "button",
        disabled: terminal.includes(run.status) }, "Cancel run");
      cancel.addEventListener("click", async () => {
        cancel.disabled = true;
        try {
          await api("POST", "/runs/" + encodeURIComponent(runId) + "/cancel", {});
        } catch (error) {
          Toren.showError(header, error);
        }
        refresh();
      });
      // the run's agent version, and Upgrade while it has not finished and is not on the
      // version served now (POST /runs/{id}/upgrade)
      if (served === undefined) served = await servedVersion(run.agent);  // once per page
      let upgrade = null;
      if (!terminal.includes(run.status) && run.agent_version && served &&
          run.agent_version !== served.hash) {
        upgrade = el("button", { id: "upgrade-run", type: "button" },
          "Upgrade to " + (served.human_version || served.hash.slice(0, 12)));
        upgrade.addEventListener("click", async () => {
          upgrade.disabled = true;
          try {
            await api("POST", "/runs/" + encodeURIComponent(runId) + "/upgrade", {});
          } catch (error) {
            Toren.showError(header, error);
          }
          refresh();
        });
      }
      header.replaceChildren(
        el("dl", { class: "facts" },
          el("dt", {}, "Agent"), el("dd", {}, run.agent),
          run.agent_version ? el("dt", {}, "Version") : null,
          run.agent_version ? el("dd", { id: "run-version" }, (run.agent_human_version ?
            run.agent_human_version + " " : "") + "(" + run.agent_version.slice(0, 12) + ")",
          served && run.agent_version !== served.hash ? el("span", { class: "warn" },
            " · not the version served now") : "") : null,
          el("dt", {}, "Status"), el("dd", { id: "run-status" }, Toren.status(run.status)),
          el("dt", {}, "Why"), el("dd", { id: "run-why" },
            run.stop_reason === "budget_exhausted" ?
              el("strong", { class: "error", id: "budget-exhausted" }, "Budget exhausted: ") : "",
            run.why || ""),
          run.schedule ? el("dt", {}, "Schedule") : null,
          run.schedule ? el("dd", { id: "run-schedule" }, "started by schedule ",
            el("a", { href: "#/runs?" + new URLSearchParams({ agent: run.agent,
              schedule: run.schedule }) }, run.schedule), " of " + run.agent) : null,
          ...budgetFacts(run.budget),
          el("dt", {}, "Model calls"), el("dd", {}, String(t.model_calls)),
          el("dt", {}, "Tool calls"), el("dd", {}, String(t.tool_calls)),
          el("dt", {}, "Tokens"), el("dd", {}, t.input_tokens + " in, " + t.output_tokens +
            " out" + (t.image_tokens ? " (" + t.image_tokens + " of the input for images and " +
              "PDF pages, estimated)" : "")),
          el("dt", {}, "Cost"), el("dd", { id: "run-cost" }, money(t.cost_usd) +
            (t.cost_unknown_calls ? " (+" + t.cost_unknown_calls + " calls of unknown cost)"
              : "")),
          (t.cache_read_tokens || t.cache_write_tokens) ? el("dt", {}, "Prompt cache") : null,
          (t.cache_read_tokens || t.cache_write_tokens) ? el("dd", { id: "run-cache" },
            t.cache_read_tokens + " tokens read, " + t.cache_write_tokens + " written; " +
            (t.cache_saved_usd >= 0 ? "saved " + money(t.cache_saved_usd)
              : "cost " + money(-t.cache_saved_usd) + " more so far")) : null,
          el("dt", {}, "Retries"), el("dd", {}, String(t.retries)),
          run.error ? el("dt", {}, "Latest error") : null,
          run.error ? el("dd", { class: "error", id: "run-error" },
            run.error.code + ": " + run.error.message) : null,
          run.output !== null ? el("dt", {}, "Output") : null,
          run.output !== null ? el("dd", { id: "run-output" }, Toren.folded(run.output)) : null),
        cancel, upgrade || "");
    }

    await refresh();
    const timeline = Toren.timeline(tree);
    let pending = null;
    const later = () => {  // one header refresh per burst of events
      if (!pending) pending = setTimeout(() => { pending = null; refresh().catch(() => {}); }, 300);
    };
    ctx.onLeave(() => clearTimeout(pending));
    ctx.onLeave(Toren.follow(runId, {
      onEvent: (event) => { timeline.event(event); later(); },
      onText: (piece) => timeline.text(piece),
      onEnd: () => refresh().catch(() => {}),
      onError: (error) => Toren.showError(root, error),
    }));
  },
});
