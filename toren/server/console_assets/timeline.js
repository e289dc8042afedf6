// A run's tree, built from its events as they arrive: waves -> tasks -> steps, each model call
// with its model, tokens, cost and latency, each tool call with its arguments and result
// (long values folded), retries with their error, the files shown to the model (thumbnails of
// images, links to PDFs) and the tokens they cost; and the model's text as it is generated.
// Used by the run page and the session page.
"use strict";

Toren.timeline = (container, options = {}) => {
  const { el, folded, money } = Toren;
  const waves = new Map();
  const tasks = new Map();
  const steps = new Map();
  const tools = new Map();
  const approvals = new Map();  // call id -> its approval's state line
  const fellBack = new Map();  // "task/step" -> the ModelFellBack before that step's call
  const conversation = options.conversation;  // sessions: a chat view beside the tree

  function waveNode(number) {
    if (!waves.has(number)) {
      const list = el("div", { class: "wave-tasks" });
      const node = el("section", { class: "wave", "data-wave": number },
        el("h3", {}, "Wave " + number), list);
      container.append(node);
      waves.set(number, list);
    }
    return waves.get(number);
  }

  function taskNode(taskId, wave) {
    if (!tasks.has(taskId)) {
      const head = el("div", { class: "task-head" }, el("strong", {}, "Task " + taskId));
      const body = el("div", { class: "task-steps" });
      const node = el("section", { class: "task", "data-task": taskId }, head, body);
      (wave === undefined || wave === null ? container : waveNode(wave)).append(node);
      tasks.set(taskId, { node, head, body });
    }
    return tasks.get(taskId);
  }

  function stepNode(taskId, step) {
    const key = taskId + "/" + step;
    if (!steps.has(key)) {
      const live = el("div", { class: "live-text" });
      const meta = el("div", { class: "step-meta" }, "Step " + step + " · calling the model…");
      const calls = el("div", { class: "tool-calls" });
      const node = el("div", { class: "step", "data-step": key }, meta, live, calls);
      taskNode(taskId).body.append(node);
      steps.set(key, { node, meta, live, calls, done: false });
    }
    return steps.get(key);
  }

  function taskOf(event) { return event.stream.replace(/^task:/, ""); }

  // The input tokens a model call spent on images and PDF pages (estimated), 0 for none.
  function imageTokens(data) {
    return data.image_tokens || (data.usage && data.usage.image_tokens) || 0;
  }

  function text(piece) {
    const step = stepNode(piece.task_id, piece.step);
    if (step.done) return;
    step.live.classList.add("streaming");
    step.live.append(document.createTextNode(piece.text));
    if (conversation) conversation.text(piece);
  }

  function event(e) {
    const d = e.data;
    switch (e.type) {
      case "RunCreated":
        container.append(el("div", { class: "run-input" }, el("strong", {}, "Input "),
          folded(d.input)));
        break;
      case "WaveStarted":
        waveNode(d.wave);
        break;
      case "TaskScheduled":
        taskNode(d.task_id, d.wave);
        break;
      case "TaskStarted": {
        const task = taskNode(taskOf(e));
        task.head.append(" · " + (d.subagent ? "subagent " + d.subagent : "agent") + " · " +
          d.model);
        if ((d.attachments || []).length) {  // the run's files its model is shown
          task.head.after(el("div", { class: "task-files" },
            el("span", { class: "muted" }, "Files shown to the model"),
            Toren.attachments(d.attachments)));
        }
        break;
      }
      case "ModelCallStarted":
        if (d.purpose !== "compaction") stepNode(taskOf(e), d.step);
        if (d.rate_limit_wait_s) {  // the call waited for room in the fleet's rate limits
          taskNode(taskOf(e)).body.append(el("div", { class: "note rate-limit", role: "status" },
            "Step " + d.step + " waited " + Number(d.rate_limit_wait_s).toFixed(1) +
            " s for the provider rate limit" + (d.rate_limited_by ? " (" + d.rate_limited_by + ")" : "")));
        }
        break;
      case "ModelCallCompleted": {
        if (d.purpose === "compaction") {
          taskNode(taskOf(e)).body.append(el("div", { class: "note" },
            "Compacted the conversation (" + d.usage.input_tokens + " tokens in)"));
          break;
        }
        const step = stepNode(taskOf(e), d.step);
        step.done = true;
        step.live.classList.remove("streaming");
        step.live.replaceChildren(d.text ? el("div", { class: "model-text" }, d.text) : "");
        step.meta.replaceChildren(
          el("span", { class: "step-no" }, "Step " + d.step), " · ",
          el("span", { class: "model" }, d.model),
          fellBack.has(taskOf(e) + "/" + d.step) ? el("span", { class: "fell-back warn" },
            " (fell back from " + fellBack.get(taskOf(e) + "/" + d.step).from_model + " (" +
            fellBack.get(taskOf(e) + "/" + d.step).reason + "))") : "", " · ",
          el("span", { class: "tokens" }, d.usage.input_tokens + " → " +
            d.usage.output_tokens + " tokens"),
          imageTokens(d) ? el("span", { class: "image-tokens" }, " (" + imageTokens(d) +
            " for images, estimated)") : "", " · ",
          el("span", { class: "cost" }, money(d.cost_usd)), " · ",
          el("span", { class: "latency" }, Number(d.latency_ms).toFixed(1) + " ms"),
          d.repeated ? el("span", { class: "warn" }, " · repeated after a crash") : "");
        if (conversation) conversation.completed(e);
        break;
      }
      case "ToolCallStarted": {
        if (approvals.has(d.call_id)) {  // an approved call: it runs in its approval's block
          tools.get(d.call_id).replaceChildren("running…");
          if (conversation) conversation.toolStarted(e);
          break;
        }
        const step = stepNode(taskOf(e), d.step);
        const result = el("div", { class: "tool-result muted" }, "running…");
        const node = el("div", { class: "tool-call", "data-call": d.call_id },
          el("div", {}, el("strong", {}, d.name), " ",
            el("span", { class: "muted" }, "key " + d.idempotency_key)),
          el("div", { class: "args" }, "arguments ", folded(d.arguments)), result);
        step.calls.append(node);
        tools.set(d.call_id, result);
        if (conversation) conversation.toolStarted(e);
        break;
      }
      case "ToolCallCompleted": {
        let result = tools.get(d.call_id);
        if (!result) {
          result = el("div", { class: "tool-result" });
          stepNode(taskOf(e), d.step).calls.append(el("div", { class: "tool-call" },
            el("strong", {}, d.name), result));
        }
        result.className = "tool-result" + (d.is_error ? " error" : "");
        result.replaceChildren(
          (d.is_error ? "error" + (d.error_kind ? " (" + d.error_kind + ")" : "") : "result") +
            " · " + Number(d.duration_ms).toFixed(1) + " ms" +
            (d.truncated ? " · truncated from " + d.original_bytes + " bytes" : ""),
          folded(d.output), Toren.attachments(d.attachments));
        if (conversation) conversation.toolCompleted(e);
        break;
      }
      case "ApprovalRequested": {
        const step = stepNode(taskOf(e), d.step);
        const result = el("div", { class: "tool-result muted" }, "not run until approved");
        const decision = el("div", { class: "approval-state warn", role: "status" },
          "waiting for approval (id " + d.approval_id + ")" +
          ((d.approvers || []).length ? " by " + d.approvers.join(", ") : ""));
        step.calls.append(el("div", { class: "tool-call", "data-call": d.call_id,
          "data-approval": d.approval_id },
        el("div", {}, el("strong", {}, d.name), " ",
          el("span", { class: "muted" }, "key " + d.idempotency_key)),
        el("div", { class: "args" }, "arguments ", folded(d.arguments)), decision, result));
        tools.set(d.call_id, result);
        approvals.set(d.call_id, decision);
        break;
      }
      case "ApprovalDecided": {
        const decision = approvals.get(d.call_id);
        if (!decision) break;
        const ran = ["approved", "edited", "answered"].includes(d.outcome);
        decision.className = "approval-state " + (ran ? "good" : "error");
        decision.replaceChildren(d.outcome + (d.scope === "run" ? " always" : "") + " by " +
          d.decided_by + (d.granted_by ? " (approved always with " + d.granted_by + ")" : "") +
          (d.reason ? ": " + d.reason : "") + " (" + Toren.when(d.decided_at) + ")",
          d.arguments ? el("div", { class: "args edited-args" }, "edited to ",
            folded(d.arguments)) : "");
        break;
      }
      case "ApprovalEscalated": {
        const decision = approvals.get(d.call_id);
        if (!decision) break;
        decision.replaceChildren("nobody decided in time: escalated to " +
          d.approvers.join(", ") + (d.expires_at ? " until " + Toren.when(d.expires_at) : ""));
        break;
      }
      case "PolicyDecided": {  // what the agent's policies: decided (docs/guides/policy-hooks.md)
        if (d.decision === "allow" || d.decision === "keep") break;
        const subject = d.hook === "after_model_response" ? "the response"
          : (d.name || "the call") + (d.hook === "after_tool_call" ? " result" : " call");
        stepNode(taskOf(e), d.step).calls.append(el("div", {
          class: "note policy " + (d.decision === "deny" || d.decision === "block" ? "error" : "warn"),
          "data-call": d.call_id || "", role: "status" },
        "policy " + (d.plugin || "?") + ": " + d.decision + " " + subject +
          (d.reason ? ": " + d.reason : "")));
        break;
      }
      case "QuestionAsked": {  // ask_user: the call waits for a person's answer
        const result = tools.get(d.call_id);
        if (result) {
          result.className = "tool-result warn question-state";
          result.replaceChildren("waiting for an answer (question " + d.question_id + "): " +
            d.question + (d.choices && d.choices.length ? " [" + d.choices.join(" | ") + "]"
              : ""));
        }
        break;
      }
      case "QuestionAnswered": {
        const result = tools.get(d.call_id);
        if (result) {
          result.replaceChildren(d.outcome === "answered" ? "answered by " + d.answered_by
            : "the question " + d.outcome);
        }
        break;
      }
      case "ToolWaitStarted": {  // toren.wait_for_signal: the call waits for a signal
        const result = tools.get(d.call_id);
        if (result) {
          result.className = "tool-result warn signal-wait";
          result.replaceChildren("waiting for the signal " + d.name +
            (d.deadline ? " until " + Toren.when(d.deadline) : ""));
        }
        break;
      }
      case "ToolWaitEnded": {
        const result = tools.get(d.call_id);
        if (result) {
          result.replaceChildren(d.timed_out ? "no signal " + d.name + " came in time"
            : "signal " + d.name + " #" + d.signal + " came; the tool runs again");
        }
        break;
      }
      case "ModelFellBack":
        fellBack.set(taskOf(e) + "/" + d.step, d);
        stepNode(taskOf(e), d.step).calls.before(el("div", { class: "fallback warn" },
          d.from_model + " failed (" + d.reason + "): " + (d.error.message || "") +
          "; " + d.to_model + " takes over"));
        break;
      case "BudgetWarning":
        taskNode(taskOf(e)).body.append(el("div", { class: "note warn" },
          "Budget warning: " + (d.scope === "daily" ? "the agent's day" : "this run") +
          " has committed " + money(d.spent_usd) + " of " + money(d.budget_usd)));
        break;
      case "RetryScheduled":
        taskNode(taskOf(e)).body.append(el("div", { class: "retry", role: "status" },
          "Retry " + d.attempt + " of step " + d.step + " at " + Toren.when(d.next_attempt_at) +
          " (in " + Number(d.delay_s).toFixed(1) + " s): ",
          el("span", { class: "error" }, (d.error.code || "") + ": " + (d.error.message || ""))));
        break;
      case "OutputRejected":  // the answer did not match output: (a repair turn follows)
        taskNode(taskOf(e)).body.append(el("div", { class: "note warn", role: "status" },
          "The answer of step " + d.step + " does not match " + d.schema_source + " at " +
          d.where + ": " + d.problem + " (repair turn " + d.attempt + ")"));
        break;
      case "TaskFinished":
        taskNode(taskOf(e)).head.append(" · ", Toren.status(d.status), " (" + d.stop_reason +
          ", " + d.steps + " steps, " + money(d.cost_usd) + ")");
        break;
      case "UserMessage":
        taskNode(taskOf(e)).body.append(el("div", { class: "user-message" },
          el("strong", {}, "User (turn " + d.turn + ") "), d.text,
          Toren.attachments(d.attachments)));
        if (conversation) conversation.user(e);
        break;
      case "TurnEnded":
        taskNode(taskOf(e)).body.append(el("div", { class: "note" }, "Turn " + d.turn +
          " ended (" + d.stop_reason + ")"));
        break;
      case "WorkflowLogged":
        container.append(el("div", { class: "note" }, "workflow: " + d.message));
        break;
      case "SignalReceived":  // on the run's signals stream (docs/guides/signals.md)
        container.append(el("div", { class: "note signal" }, "signal " + d.name + " #" + e.seq +
          " received: ", folded(d.payload)));
        break;
      case "SignalWaitStarted":
        container.append(el("div", { class: "note", role: "status" },
          "workflow waits for the signal " + d.name +
          (d.fire_at ? " (until " + d.fire_at + ")" : "")));
        break;
      case "SignalConsumed":
        container.append(el("div", { class: "note" }, "workflow took signal " + d.name + " #" +
          d.signal));
        break;
      case "SignalWaitTimedOut":
        container.append(el("div", { class: "note warn" }, "signal wait " + d.wait +
          " timed out"));
        break;
      default:
        break;
    }
  }

  return { event, text };
};
