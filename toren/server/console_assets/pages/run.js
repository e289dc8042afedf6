// One run: its status, why it stopped, its agent version, totals and receipt figures, its
// webhook deliveries, its timeline built live from its event stream, as a tree (with the
// model's text as it is generated) or as a waterfall on a time axis (waterfall.js), the cancel
// and upgrade buttons, an answer box for each question its agent asks (ask_user), what it is a
// fork of, and the forms to fork it at a step (POST /runs/{id}/fork) and to compare it with
// another run (pages/diff.js).
"use strict";

Toren.page({
  id: "run",
  section: "runs",
  title: "Run",
  path: /^\/runs\/([0-9a-fA-F-]{36})(?:\?(.*))?$/,
  async render(root, [runId, query], ctx) {
    const { el, api, money } = Toren;
    const header = el("div", { class: "run-header", id: "run-header" });
    const tree = el("div", { class: "tree", id: "run-tree" });
    const questions = el("div", { class: "questions", id: "run-questions" });
    // the timeline as a tree (waves -> tasks -> steps) or as a waterfall on a time axis
    // (waterfall.js), both from the one event stream; the choice is in the URL (?view=)
    const waterfallNode = el("div", { class: "waterfall", id: "run-waterfall", hidden: true });
    const views = el("div", { class: "view-switch", role: "group", "aria-label": "Timeline view" },
      el("button", { type: "button", id: "view-tree", "data-view": "tree" }, "Tree"),
      el("button", { type: "button", id: "view-waterfall", "data-view": "waterfall" },
        "Waterfall"));
    root.append(el("h1", {}, "Run ", el("code", {}, runId)), header, questions, forkPanel(),
      el("div", { class: "timeline-head" }, el("h2", {}, "Timeline"), views), tree,
      waterfallNode);
    const asked = new Map();  // question id -> its card, kept while open so typing survives

    // A question the agent waits on (ask_user): its choices as buttons, or a text box;
    // POST /runs/{id}/questions/{qid}/answer answers it once (409: someone was first).
    function questionCard(question) {
      const result = el("div", { class: "question-result", role: "status" });
      const node = el("section", { class: "question", "data-question": question.id },
        el("div", { class: "question-head" }, el("strong", {}, "The agent asks: "),
          el("span", { class: "question-text" }, question.question)),
        el("div", { class: "muted" }, "asked " + Toren.when(question.asked_at) +
          (question.expires_at ? " · expires " + Toren.when(question.expires_at) : "")));
      const actions = el("div", { class: "question-actions" });
      async function send(answer) {
        for (const control of actions.querySelectorAll("button, input")) control.disabled = true;
        node.dataset.sending = "1";  // its own answer, not someone else's, settles it
        try {
          const shown = await api("POST", "/runs/" + encodeURIComponent(runId) + "/questions/" +
            encodeURIComponent(question.id) + "/answer", { answer });
          result.replaceChildren(el("span", { class: "answered" }, "Answered: " + shown.answer));
        } catch (error) {
          if (!(error instanceof Toren.ApiError)) throw error;
          if (error.status === 409 && error.body.question) {
            settled(node, error.body.question);
            return;
          } else {
            result.replaceChildren(el("span", { class: "error" },
              error.code + ": " + error.message));
            for (const control of actions.querySelectorAll("button, input")) {
              control.disabled = false;
            }
            delete node.dataset.sending;
            return;
          }
        }
        actions.remove();
      }
      if (question.choices.length) {
        for (const choice of question.choices) {
          actions.append(el("button", { type: "button", class: "answer-choice",
            onclick: () => send(choice) }, choice));
        }
      } else {
        const box = el("input", { type: "text", class: "answer-text", maxlength: 8000,
          placeholder: "your answer", "aria-label": "Answer" });
        const submit = el("button", { type: "button", class: "answer-submit",
          onclick: () => { if (box.value.trim()) send(box.value); } }, "Answer");
        box.addEventListener("keydown", (event) => { if (event.key === "Enter") submit.click(); });
        actions.append(box, submit);
      }
      node.append(actions, result);
      return node;
    }

    // A question someone else settled first (answered elsewhere, expired, cancelled): the
    // card says so instead of its answer box, and stays until the next question replaces it.
    function settled(node, first) {
      for (const control of node.querySelectorAll(".question-actions button, " +
        ".question-actions input")) control.disabled = true;
      node.querySelector(".question-result").replaceChildren(
        el("span", { class: "warn already-answered" }, "Already " + first.status +
          (first.answer !== null && first.answer !== undefined ? ": " + first.answer : "")));
      const actions = node.querySelector(".question-actions");
      if (actions) actions.remove();
      node.classList.add("settled");
    }

    // A card still open here whose question left the pending list was settled elsewhere:
    // what happened is read from GET /runs/{id}/questions, so a person typing an answer
    // sees who was first rather than the card vanishing under them.
    async function settledElsewhere(gone) {
      let all = [];
      try {
        all = (await api("GET", "/runs/" + encodeURIComponent(runId) + "/questions")).questions;
      } catch (_) {
        all = [];
      }
      for (const [id, node] of gone) {
        const first = all.find((q) => q.id === id);
        if (first) {
          settled(node, first);
        } else {
          node.remove();
          asked.delete(id);
        }
      }
    }

    function showQuestions(open) {
      const ids = new Set(open.map((q) => q.id));
      const gone = [];
      for (const [id, node] of asked) {
        // an answered or settled card stays: it says what happened
        if (!ids.has(id) && node.querySelector(".question-actions") && !node.dataset.sending) {
          gone.push([id, node]);
        }
      }
      if (gone.length) settledElsewhere(gone);
      for (const question of open) {
        if (!asked.has(question.id)) {
          const node = questionCard(question);
          asked.set(question.id, node);
          questions.append(node);
        }
      }
    }
    const terminal = ["completed", "stopped", "failed", "cancelled"];

    // Fork this run at a step, optionally with another model or system prompt (a new run
    // copies the steps before it at no cost and goes on live; docs/guides/fork-and-replay.md),
    // or compare it with another run.
    function forkPanel() {
      const status = el("div", { id: "fork-status", role: "status" });
      const step = el("input", { type: "number", id: "fork-step", min: 0, value: 1,
        "aria-label": "Fork at step" });
      const model = el("input", { type: "text", id: "fork-model", maxlength: 200,
        placeholder: "the same model", "aria-label": "Model for the fork" });
      const prompt = el("textarea", { id: "fork-prompt", rows: 3,
        placeholder: "the same system prompt", "aria-label": "System prompt for the fork" });
      const fork = el("button", { type: "button", id: "fork-run" }, "Fork");
      fork.addEventListener("click", async () => {
        const body = { at_step: Number(step.value) };
        if (model.value.trim()) body.model = model.value.trim();
        if (prompt.value.trim()) body.prompt = prompt.value;
        fork.disabled = true;
        status.replaceChildren("Forking\u2026");
        try {
          const made = await api("POST", "/runs/" + encodeURIComponent(runId) + "/fork", body);
          location.hash = "#/runs/" + encodeURIComponent(made.run.id);
        } catch (error) {
          status.replaceChildren();
          Toren.showError(status, error);
          fork.disabled = false;
        }
      });
      const other = el("input", { type: "text", id: "compare-with", maxlength: 36,
        placeholder: "another run's id", "aria-label": "Run to compare with" });
      const compare = el("button", { type: "button", id: "compare-run" }, "Compare");
      compare.addEventListener("click", () => {
        const id = other.value.trim();
        if (!/^[0-9a-fA-F-]{36}$/.test(id)) {
          status.replaceChildren(el("span", { class: "error" }, "A run id is 36 characters " +
            "of hex digits and dashes"));
          return;
        }
        location.hash = "#/diff/" + encodeURIComponent(runId) + "/" + encodeURIComponent(id);
      });
      return el("details", { class: "fork-panel", id: "fork-panel" },
        el("summary", {}, "Fork or compare"),
        el("div", { class: "fork-form" }, el("label", {}, "Fork at step ", step),
          el("label", {}, "model ", model), el("label", { class: "wide" }, "system prompt ",
            prompt), fork),
        el("div", { class: "fork-form" }, el("label", {}, "Compare with ", other), compare),
        status);
    }

    // The run's family: the run whose task started it (a cross-agent call it waits for, or a
    // background run), and the runs its own tasks started (GET /runs/{id}/children), each a
    // link, so a family is walked both ways from any member.
    function familyFacts(run, children) {
      const facts = [];
      if (run.parent) {
        facts.push(el("dt", {}, "Started by"), el("dd", { id: "run-parent" },
          (run.parent.kind === "background" ? "a background run of " : "a call from ") +
          run.parent.agent + ", run ",
          el("a", { href: "#/runs/" + encodeURIComponent(run.parent.run_id) },
            run.parent.run_id), run.parent.task_id ? " (task " + run.parent.task_id + ")" : ""));
      }
      if (children.length) {
        facts.push(el("dt", {}, "Runs it started"), el("dd", { id: "run-children" },
          ...children.map((child) => el("div", { class: "child-run", "data-run": child.id },
            el("a", { href: "#/runs/" + encodeURIComponent(child.id) }, child.id), " " +
            child.agent + " \u00b7 " + (child.parent && child.parent.kind === "background" ?
              "background" : "call") + " \u00b7 ", Toren.status(child.status)))));
      }
      return facts;
    }

    // The forks made from this run (GET /runs/{id}/forks), each linked, with its comparison.
    function forksFacts(forks) {
      if (!forks.length) return [];
      return [el("dt", {}, "Forks"), el("dd", { id: "run-forks" }, ...forks.map((fork) =>
        el("div", { class: "fork-run", "data-run": fork.id },
          el("a", { href: "#/runs/" + encodeURIComponent(fork.id) }, fork.id), " ",
          Toren.status(fork.status), " \u00b7 ",
          el("a", { class: "compare-fork", href: "#/diff/" + encodeURIComponent(runId) + "/" +
            encodeURIComponent(fork.id) }, "compare"))))];
    }

    // What this run is a fork of, linked both ways: the source, and the comparison.
    function forkFacts(fork) {
      if (!fork) return [];
      const overrides = [fork.model ? "model " + fork.model : "",
        fork.prompt_sha256 ? "another system prompt" : ""].filter(Boolean);
      return [el("dt", {}, "Forked from"), el("dd", { id: "run-fork" },
        el("a", { href: "#/runs/" + encodeURIComponent(fork.source_run_id) },
          fork.source_run_id), " at " + fork.unit + " " + fork.at_step +
          (overrides.length ? " with " + overrides.join(" and ") : "") + " \u00b7 ",
        el("a", { id: "compare-source", href: "#/diff/" + encodeURIComponent(
          fork.source_run_id) + "/" + encodeURIComponent(runId) }, "compare with the source"))];
    }

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

    // The run's completion webhook deliveries (GET /runs/{id}/webhooks): each with its state,
    // its attempts and the latest error; nothing for a run without webhooks.
    function webhookFacts(deliveries) {
      if (!deliveries.length) return [];
      return [el("dt", {}, "Webhooks"), el("dd", { id: "run-webhooks" }, ...deliveries.map((d) =>
        el("div", { class: "webhook" + (d.state === "failed" ? " error" : "") },
          d.event + " \u2192 " + d.url + ": " + d.state + " (" + d.attempts + " attempt" +
          (d.attempts === 1 ? "" : "s") + ")" + (d.last_error ? " \u00b7 " + d.last_error : ""))))];
    }

    // the run's place in the queue (GET /runs/{id} queue; docs/guides/flow-control.md)
    const waitingWords = {
      concurrency: "waiting for a slot: its concurrency key's runs are all executing",
      queued: "ready, waiting for a worker",
      delayed: "waiting for a retry or a wake-up that is not due yet",
    };
    function queueFacts(queue) {
      if (!queue) return [];
      const parts = [];
      if (queue.priority) parts.push("priority " + queue.priority);
      if (queue.concurrency_key !== null && queue.concurrency_key !== undefined) {
        parts.push("concurrency key " + queue.concurrency_key);
      }
      if (queue.waiting) parts.push(waitingWords[queue.waiting] || "waiting (" + queue.waiting + ")");
      if (!parts.length) return [];
      return [el("dt", {}, "Queue"), el("dd", { id: "run-queue" }, parts.join(" \u00b7 "))];
    }

    let served;
    async function refresh() {
      const run = await api("GET", "/runs/" + encodeURIComponent(runId));
      showQuestions(run.pending_questions || []);
      const hooks = await api("GET", "/runs/" + encodeURIComponent(runId) + "/webhooks").then(
        (found) => found.deliveries, () => []);
      const [children, forks] = await Promise.all([
        api("GET", "/runs/" + encodeURIComponent(runId) + "/children").then(
          (found) => found.children, () => []),
        api("GET", "/runs/" + encodeURIComponent(runId) + "/forks").then(
          (found) => found.forks, () => [])]);
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
          ...familyFacts(run, children),
          ...forksFacts(forks),
          ...forkFacts(run.fork),
          ...queueFacts(run.queue),
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
          run.output !== null ? el("dd", { id: "run-output" }, Toren.folded(run.output)) : null,
          ...webhookFacts(hooks)),
        cancel, upgrade || "");
    }

    await refresh();
    const timeline = Toren.timeline(tree);
    const waterfall = Toren.waterfall(waterfallNode, { runId });
    ctx.onLeave(() => waterfall.stop());
    function choose(view) {
      tree.hidden = view !== "tree";
      waterfall.visible(view === "waterfall");
      for (const button of views.querySelectorAll("button")) {
        button.setAttribute("aria-pressed", String(button.dataset.view === view));
      }
      // the view in the URL without a new route (a hashchange would render the page again)
      history.replaceState(null, "", "#/runs/" + encodeURIComponent(runId) +
        (view === "tree" ? "" : "?view=" + view));
    }
    for (const button of views.querySelectorAll("button")) {
      button.addEventListener("click", () => choose(button.dataset.view));
    }
    choose(new URLSearchParams(query || "").get("view") === "waterfall" ? "waterfall" : "tree");
    let pending = null;
    const later = () => {  // one header refresh per burst of events
      if (!pending) pending = setTimeout(() => { pending = null; refresh().catch(() => {}); }, 300);
    };
    ctx.onLeave(() => clearTimeout(pending));
    ctx.onLeave(Toren.follow(runId, {
      onEvent: (event) => { timeline.event(event); waterfall.event(event); later(); },
      onText: (piece) => timeline.text(piece),
      onEnd: () => { waterfall.end(); refresh().catch(() => {}); },
      onError: (error) => Toren.showError(root, error),
    }));
  },
});
