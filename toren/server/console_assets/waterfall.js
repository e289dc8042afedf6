// A run's waterfall, built from the same events as its tree (timeline.js), as they arrive:
// one row per task (grouped by wave) and one per step on a shared time axis, each step's
// model call attempts, the backoff gaps between them and its tool calls as bars, with
// durations, tokens and cost; the critical path (what set the run's end) marked; a bar
// clicked (or Enter on it) shows its step's prompt, response, tool arguments and result,
// folded and as text. Times are the events' created_at (the log's clock), tool calls end
// there and start duration_ms earlier. Bars are placed with element.style (CSSOM: the
// page's CSP forbids style attributes in markup, not this), in one pass per animation frame.
"use strict";

Toren.waterfall = (container, options = {}) => {
  const { el, folded, money } = Toren;
  const runId = options.runId;
  const waves = new Map();  // wave number (or "none") -> { rows, tasks: [] }
  const tasks = new Map();  // task id -> task record
  const bars = [];  // every bar: { node, start, end (null: still going), row, kind }
  let first = null;  // ms of the earliest event: the axis' 0
  let last = null;  // ms of the latest event
  let live = true;
  let dirty = false;
  let frame = null;
  let timer = null;
  let axisSpan = null;  // the span its ticks were written for
  let extent = 0;  // ms the axis spans while the run works (roundUp of what it needs)
  let tabStop = null;  // the bar Tab reaches (the last one focused)
  let receipt = null;  // GET /runs/{id}/receipt, read once for the system prompts
  const timing = { events: 0, buildMs: 0, layouts: 0, layoutMs: 0, lastLayoutMs: 0 };

  const axis = el("div", { class: "wf-axis", "aria-hidden": "true" });
  const body = el("div", { class: "wf-body" });
  const detail = el("section", { class: "wf-detail", id: "waterfall-detail", hidden: true,
    tabindex: "-1", "aria-label": "The chosen call" });
  container.append(legend(), el("div", { class: "wf-row wf-axis-row" },
    el("div", { class: "wf-name" }, "Task / step"), axis,
    el("div", { class: "wf-figures" }, "Duration · tokens · cost")), body, detail);

  // the arrow keys move between bars in the order shown (left/up: the one before), Home and
  // End to the first and last; Enter or Space opens one (they are buttons)
  body.addEventListener("keydown", (event) => {
    const moves = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 };
    if (!event.target.classList.contains("wf-bar")) return;
    if (!(event.key in moves) && event.key !== "Home" && event.key !== "End") return;
    const all = [...body.querySelectorAll("button.wf-bar")];
    const index = all.indexOf(event.target);
    const next = event.key === "Home" ? 0 : event.key === "End" ? all.length - 1
      : Math.min(all.length - 1, Math.max(0, index + moves[event.key]));
    event.preventDefault();
    all[next].focus();
  });
  detail.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      const close = detail.querySelector(".wf-close");
      if (close) close.click();
    }
  });

  function legend() {
    const key = (cls, text) => el("span", { class: "wf-key" },
      el("span", { class: "wf-swatch " + cls, "aria-hidden": "true" }), text);
    return el("div", { class: "wf-legend" },
      key("wf-model", "model call"), key("wf-tool", "tool call"),
      key("wf-failed", "failed attempt"), key("wf-backoff", "backoff before a retry"),
      key("wf-running", "still going"), key("wf-critical-key", "critical path"),
      el("p", { class: "muted wf-explain" }, "The critical path is the chain of calls that " +
        "set the run's end: in each wave the task that finished last, and in that task each " +
        "step's model call (with its failed attempts and backoffs) and its tool call that " +
        "ended last. Click a bar, or reach it with Tab and the arrow keys and press Enter, for " +
        "its details (Escape closes them)."));
  }

  // -- the model: waves, tasks, steps and their bars ---------------------------------------
  function ms(iso) {
    const value = iso ? Date.parse(iso) : NaN;
    return isNaN(value) ? null : value;
  }

  function waveOf(number) {
    const key = number === undefined || number === null ? "none" : String(number);
    if (!waves.has(key)) {
      const rows = el("div", { class: "wf-wave-rows" });
      const node = el("section", { class: "wf-wave", "data-wave": key },
        key === "none" ? "" : el("h3", { class: "wf-wave-head" }, "Wave " + key), rows);
      // waves in their order, whatever order their events came in
      let next = null;
      for (const group of waves.values()) {
        if (group.key !== "none" && key !== "none" && Number(group.key) > Number(key) &&
            (!next || Number(group.key) < Number(next.key))) next = group;
      }
      if (next) body.insertBefore(node, next.node); else body.append(node);
      waves.set(key, { key, node, rows, tasks: [] });
    }
    return waves.get(key);
  }

  function taskOf(taskId, wave) {
    if (!tasks.has(taskId)) {
      const figures = el("div", { class: "wf-figures" });
      const track = el("div", { class: "wf-track" });
      const name = el("div", { class: "wf-name" }, el("strong", {}, "Task " + taskId));
      const head = el("div", { class: "wf-row wf-task", "data-task": taskId }, name, track,
        figures);
      const steps = el("div", { class: "wf-steps" });
      const group = waveOf(wave);
      group.rows.append(head, steps);
      const task = { id: taskId, wave: group.key, head, name, track, figures, steps,
        stepMap: new Map(), start: null, end: null, span: null, finished: false,
        cost: 0, input: 0, output: 0, figuresText: null, status: null,
        started: null, toolResults: new Map(), userMessages: [] };
      task.span = addBar(task, track, "wf-task-span", null, null, { kind: "task", task });
      group.tasks.push(task);
      tasks.set(taskId, task);
    }
    return tasks.get(taskId);
  }

  function stepOf(task, step, purpose) {
    const key = purpose === "compaction" ? "c" + step : String(step);
    if (!task.stepMap.has(key)) {
      const track = el("div", { class: "wf-track" });
      const figures = el("div", { class: "wf-figures" });
      const row = el("div", { class: "wf-row wf-step", "data-task": task.id, "data-step": key },
        el("div", { class: "wf-name" }, purpose === "compaction" ? "compaction" : "Step " + step),
        track, figures);
      task.steps.append(row);
      const entry = { key, step, purpose, row, track, figures, attempts: [], tools: new Map(),
        retries: [], completed: null };
      task.stepMap.set(key, entry);
    }
    return task.stepMap.get(key);
  }

  function addBar(task, track, cls, start, end, info) {
    const node = el(info.kind === "task" ? "div" : "button", info.kind === "task" ?
      { class: "wf-bar " + cls, "aria-hidden": "true" } :
      { class: "wf-bar " + cls, type: "button", "data-kind": info.kind });
    if (info.kind !== "task") {
      node.addEventListener("click", () => show(bar));
      // one tab stop for all the bars (the arrow keys move between them): a long run's
      // thousand bars are not a thousand presses of Tab
      node.tabIndex = tabStop === null ? 0 : -1;
      if (tabStop === null) tabStop = node;
      node.addEventListener("focus", () => {
        if (tabStop === node) return;
        tabStop.tabIndex = -1;
        node.tabIndex = 0;
        tabStop = node;
      });
    }
    track.append(node);
    const bar = Object.assign({ node, start, end, shown: null, task }, info);
    bars.push(bar);
    return bar;
  }

  function see(at) {
    if (at === null) return;
    if (first === null || at < first) first = at;
    if (last === null || at > last) last = at;
  }

  function stretch(task, at) {
    if (at === null) return;
    if (task.start === null || at < task.start) task.start = at;
    if (task.end === null || at > task.end) task.end = at;
  }

  function labelOf(bar) {
    const seconds = (value) => (value / 1000).toFixed(value < 10000 ? 2 : 1) + " s";
    if (bar.kind === "model") {
      const d = bar.completed && bar.completed.data;
      if (!d) return "Step " + bar.step + " model call, still going";
      return "Step " + bar.step + " model call " + d.model + ": " + seconds(d.latency_ms) +
        ", " + d.usage.input_tokens + " tokens in, " + d.usage.output_tokens + " out, " +
        money(d.cost_usd);
    }
    if (bar.kind === "tool") {
      const d = bar.completed && bar.completed.data;
      return "Step " + bar.step + " tool " + bar.started.data.name + (d ? ": " +
        seconds(d.duration_ms) + (d.is_error ? ", error" : "") : ", still running");
    }
    if (bar.kind === "failed") {
      return "Step " + bar.step + " attempt " + bar.attempt + " failed" + (bar.retry ? ": " +
        (bar.retry.data.error.code || "") : bar.fellBack ? ": " + bar.fellBack.data.from_model +
        " (" + bar.fellBack.data.reason + "), fell back to " + bar.fellBack.data.to_model
        : ", cut short");
    }
    if (bar.kind === "backoff") {
      return "Step " + bar.step + " backoff " + Number(bar.retry.data.delay_s).toFixed(1) +
        " s before retry " + bar.retry.data.attempt;
    }
    return "";
  }

  function figuresOf(step) {
    const parts = [];
    const call = step.completed && step.completed.data;
    if (call) {
      parts.push(el("span", { class: "wf-ms" }, (call.latency_ms / 1000).toFixed(2) + " s"),
        " · ", el("span", { class: "wf-tokens" }, call.usage.input_tokens + "→" +
          call.usage.output_tokens + " tok"), " · ", el("span", { class: "wf-cost" },
          money(call.cost_usd)));
    } else {
      parts.push(el("span", { class: "muted" }, "calling the model…"));
    }
    if (step.retries.length) {
      parts.push(" · ", el("span", { class: "warn wf-retries" }, step.retries.length +
        (step.retries.length === 1 ? " retry" : " retries")));
    }
    for (const tool of step.tools.values()) {
      const d = tool.completed && tool.completed.data;
      parts.push(" · ", el("span", { class: "wf-tool-figure" + (d && d.is_error ? " error" : "") },
        tool.started.data.name + " " + (d ? Number(d.duration_ms).toFixed(1) + " ms" : "…")));
    }
    step.figures.replaceChildren(...parts);
  }

  function taskFigures(task) {
    const span = task.start !== null && task.end !== null ? task.end - task.start : 0;
    const text = (task.status ? task.status + " · " : "") + (span / 1000).toFixed(2) +
      " s · " + task.input + "→" + task.output + " tok · " + money(task.cost);
    if (text !== task.figuresText) {  // written only when it changed
      task.figuresText = text;
      task.figures.textContent = text;
    }
  }

  // The step's attempt in flight, if any, ends at `at` as a failed one (`why`: the
  // RetryScheduled or ModelFellBack that says why; neither: it was cut short).
  function failAttempt(step, at, why) {
    const open = step.attempts[step.attempts.length - 1];
    if (!open || open.end !== null || open.kind !== "model") return;
    open.end = at;
    open.kind = "failed";
    open.attempt = step.attempts.length;
    Object.assign(open, why);
    open.node.classList.remove("wf-running", "wf-model");
    open.node.classList.add("wf-failed");
    open.node.dataset.kind = "failed";
  }

  // -- events ------------------------------------------------------------------------------
  // Events that came before the waterfall was first shown: taken in when it is (the tree is
  // the default view, and a page that never shows the waterfall should not pay for it).
  let waiting = [];

  function event(e) {
    if (waiting !== null) {
      waiting.push(e);
      return;
    }
    const began = performance.now();
    try { apply(e); } finally {
      timing.events += 1;
      timing.buildMs += performance.now() - began;
      later();
    }
  }

  function apply(e) {
    const d = e.data;
    const at = ms(e.created_at);
    see(at);
    const taskId = e.stream.startsWith("task:") ? e.stream.slice(5) : null;
    switch (e.type) {
      case "TaskScheduled":
        taskOf(d.task_id, d.wave);
        break;
      case "TaskStarted": {
        const task = taskOf(taskId);
        task.started = e;
        stretch(task, at);
        task.name.append(" ", el("span", { class: "muted" }, d.subagent || "agent"));
        break;
      }
      case "ModelCallStarted": {
        const task = taskOf(taskId);
        stretch(task, at);
        const step = stepOf(task, d.step, d.purpose);
        // started again with no end: cut short (a worker stopped while it was in flight)
        failAttempt(step, at, {});
        const backoff = step.retries.length ? step.retries[step.retries.length - 1].gap : null;
        if (backoff && backoff.end === null) backoff.end = at;
        step.attempts.push(addBar(task, step.track, "wf-model wf-running", at, null,
          { kind: "model", step: d.step, started: e, stepEntry: step }));
        figuresOf(step);
        break;
      }
      case "ModelCallCompleted": {
        const task = taskOf(taskId);
        stretch(task, at);
        const step = stepOf(task, d.step, d.purpose);
        let bar = step.attempts[step.attempts.length - 1];
        if (!bar || bar.end !== null) {  // its start is not in the log (an older run)
          bar = addBar(task, step.track, "wf-model", at - d.latency_ms, null,
            { kind: "model", step: d.step, started: null, stepEntry: step });
          step.attempts.push(bar);
        }
        bar.end = at;
        bar.completed = e;
        bar.node.classList.remove("wf-running");
        step.completed = e;
        // one call of unknown cost makes the task's unknown (money(null) says so)
        task.cost = task.cost === null || d.cost_usd === null || d.cost_usd === undefined ? null
          : task.cost + d.cost_usd;
        task.input += d.usage.input_tokens;
        task.output += d.usage.output_tokens;
        figuresOf(step);
        break;
      }
      case "RetryScheduled": {
        const task = taskOf(taskId);
        stretch(task, at);
        const step = stepOf(task, d.step);
        failAttempt(step, at, { retry: e });
        const gap = addBar(task, step.track, "wf-backoff", at, null,
          { kind: "backoff", step: d.step, retry: e, due: ms(d.next_attempt_at) });
        step.retries.push({ event: e, gap });
        figuresOf(step);
        break;
      }
      case "ModelFellBack": {  // the step's model failed: the next of fallbacks: takes over
        const task = taskOf(taskId);
        stretch(task, at);
        const step = stepOf(task, d.step);
        failAttempt(step, at, { fellBack: e });
        figuresOf(step);
        break;
      }
      case "ToolCallStarted": {
        const task = taskOf(taskId);
        const step = stepOf(task, d.step);
        // started with the model's answer in one append: its own start is its end minus
        // its duration, known when it completes
        step.tools.set(d.call_id, addBar(task, step.track, "wf-tool wf-running", at, null,
          { kind: "tool", step: d.step, started: e }));
        figuresOf(step);
        break;
      }
      case "ToolCallCompleted": {
        const task = taskOf(taskId);
        stretch(task, at);
        const step = stepOf(task, d.step);
        let bar = step.tools.get(d.call_id);
        if (!bar) {
          bar = addBar(task, step.track, "wf-tool", null, null, { kind: "tool", step: d.step,
            started: { data: { name: d.name, arguments: {} } } });
          step.tools.set(d.call_id, bar);
        }
        bar.end = at;
        bar.start = at - Number(d.duration_ms || 0);
        bar.completed = e;
        bar.node.classList.remove("wf-running");
        if (d.is_error) bar.node.classList.add("wf-error");
        task.toolResults.set(d.step, (task.toolResults.get(d.step) || []).concat([e]));
        figuresOf(step);
        break;
      }
      case "UserMessage": {
        const task = taskOf(taskId);
        task.userMessages.push(e);
        break;
      }
      case "TaskFinished": {
        const task = taskOf(taskId);
        stretch(task, at);
        task.finished = true;
        task.head.classList.add("wf-finished");
        task.status = d.status;
        task.figures.classList.toggle("error", d.status !== "completed");
        break;
      }
      case "RunFinished": case "RunCancelled": case "RunDeadLettered":
        end();
        break;
      default:
        break;
    }
    if (taskId && tasks.has(taskId) && at !== null) stretch(tasks.get(taskId), at);
  }

  // -- layout: one pass per frame, writes only (nothing read back from the DOM) -------------
  function later() {
    dirty = true;
    if (frame === null && !container.hidden) frame = requestAnimationFrame(layout);
  }

  function layout() {
    frame = null;
    if (!dirty || container.hidden) return;
    dirty = false;
    const began = performance.now();
    const now = live ? Math.max(Date.now(), last || 0) : last;
    const zero = first === null ? now : first;
    let span = Math.max(1, (now || zero) - zero);
    if (live) {
      // while the run works the axis reaches past now, to a round figure, and grows in steps:
      // a tick of the clock then moves only the bars still going, not every bar
      if (span > extent) extent = roundUp(span * 1.2);
      span = extent;
    }
    const percent = (at) => Math.min(100, Math.max(0, (at - zero) / span * 100));
    for (const task of tasks.values()) {
      task.span.start = task.start;
      task.span.end = task.finished ? task.end : null;
      if (task.start !== null) taskFigures(task);
    }
    const critical = criticalBars(now);
    for (const bar of bars) {
      if (bar.start === null) continue;
      const end = bar.end === null ? (bar.kind === "backoff" && !live ? bar.due || now : now)
        : bar.end;
      const left = percent(bar.start);
      const width = Math.max(0, percent(end) - left);
      const isCritical = critical.has(bar);
      const shown = left.toFixed(3) + "/" + width.toFixed(3) + "/" + isCritical;
      if (bar.shown === shown) continue;  // unchanged: no style write
      bar.shown = shown;
      bar.node.style.left = left.toFixed(3) + "%";
      bar.node.style.width = "max(3px, " + width.toFixed(3) + "%)";
      bar.node.classList.toggle("wf-critical", isCritical);
      const labelled = bar.kind + "/" + Boolean(bar.completed) + "/" + isCritical;
      if (bar.kind !== "task" && bar.labelled !== labelled) {  // its words changed
        bar.labelled = labelled;
        const label = labelOf(bar) + (isCritical ? " (critical path)" : "");
        bar.node.setAttribute("aria-label", label);
        bar.node.title = label;
      }
    }
    for (const task of tasks.values()) {
      task.head.classList.toggle("wf-critical-task", critical.has(task.span));
    }
    if (span !== axisSpan) {
      axisSpan = span;
      axis.replaceChildren(...[0, 0.2, 0.4, 0.6, 0.8, 1].map((fraction) => {
        const tick = el("span", { class: "wf-tick" },
          Number((span * fraction / 1000).toFixed(2)) + " s");
        tick.style.left = (fraction * 100) + "%";
        return tick;
      }));
    }
    const spent = performance.now() - began;
    timing.layouts += 1;
    timing.layoutMs += spent;
    timing.lastLayoutMs = spent;
    container.dataset.bars = String(bars.filter((b) => b.kind !== "task").length);
    container.dataset.buildMs = timing.buildMs.toFixed(1);
    container.dataset.layoutMs = timing.lastLayoutMs.toFixed(1);
    container.dataset.events = String(timing.events);
  }

  // The round figure at or above ms: 1, 2, 2.5 or 5 times a power of ten.
  function roundUp(value) {
    const power = 10 ** Math.floor(Math.log10(value));
    return [1, 2, 2.5, 5, 10].map((m) => m * power).find((step) => step >= value);
  }

  // The bars that set the run's end: per wave (waves run one after another) the task that
  // ended last; in it every step's model attempts and backoffs (a task's steps run one after
  // another) and, per step, the tool call that ended last.
  function criticalBars(now) {
    const found = new Set();
    for (const group of waves.values()) {
      let latest = null;
      for (const task of group.tasks) {
        if (task.start === null) continue;
        const end = task.finished ? task.end : now;
        if (!latest || end >= latest.end) latest = { task, end };
      }
      if (!latest) continue;
      found.add(latest.task.span);
      for (const step of latest.task.stepMap.values()) {
        for (const bar of step.attempts) found.add(bar);
        for (const retry of step.retries) found.add(retry.gap);
        let lastTool = null;
        for (const tool of step.tools.values()) {
          const end = tool.end === null ? now : tool.end;
          if (!lastTool || end >= lastTool.end) lastTool = { tool, end };
        }
        if (lastTool) found.add(lastTool.tool);
      }
    }
    return found;
  }

  function tick() {
    if (!live) return;
    dirty = true;
    later();
  }

  function end() {
    live = false;
    if (timer !== null) { clearInterval(timer); timer = null; }
    container.classList.add("wf-ended");
    later();
  }

  // -- the details of a bar: its step's prompt, response, tool arguments and result ----------
  async function systemPrompt(task) {
    const sha = task.started && task.started.data.prompt_sha256;
    if (!sha || !runId) return null;
    if (!receipt) {
      receipt = Toren.api("GET", "/runs/" + encodeURIComponent(runId) + "/receipt");
    }
    try {
      const found = await receipt;
      return (found.prompts || {})[sha] || null;
    } catch (error) {
      receipt = null;  // a later click asks again
      throw error;
    }
  }

  function facts(pairs) {
    return el("dl", { class: "facts" }, ...pairs.filter((p) => p[1] !== null &&
      p[1] !== undefined).flatMap(([term, value]) => [el("dt", {}, term), el("dd", {}, value)]));
  }

  function part(title, ...content) {
    return el("div", { class: "wf-part" }, el("h4", {}, title), ...content);
  }

  function show(bar) {
    for (const other of body.querySelectorAll(".wf-bar.wf-chosen")) {
      other.classList.remove("wf-chosen");
    }
    bar.node.classList.add("wf-chosen");
    const task = bar.task;
    const close = el("button", { type: "button", class: "link wf-close" }, "Close");
    close.addEventListener("click", () => {
      detail.hidden = true;
      bar.node.classList.remove("wf-chosen");
      bar.node.focus();
    });
    const parts = [];
    if (bar.kind === "tool") {
      const started = bar.started.data;
      const d = bar.completed && bar.completed.data;
      parts.push(el("h3", {}, "Task " + task.id + " · step " + bar.step + " · tool " +
        started.name),
      facts([["Call", started.call_id], ["Idempotency key", started.idempotency_key],
        ["Duration", d ? Number(d.duration_ms).toFixed(1) + " ms" : "still running"],
        ["Ended", bar.completed ? Toren.when(bar.completed.created_at) : null],
        ["Outcome", d ? (d.is_error ? "error" + (d.error_kind ? " (" + d.error_kind + ")" : "")
          : "result") + (d.truncated ? ", truncated from " + d.original_bytes + " bytes" : "")
          : null]]),
      part("Arguments", folded(started.arguments)),
      part(d && d.is_error ? "Error" : "Result", d ? folded(d.output) :
        el("span", { class: "muted" }, "not yet")));
    } else if (bar.kind === "backoff" || bar.kind === "failed") {
      const retry = bar.retry && bar.retry.data;
      parts.push(el("h3", {}, "Task " + task.id + " · step " + bar.step + " · " +
        (bar.kind === "backoff" ? "backoff before retry " + (retry ? retry.attempt : "")
          : "failed attempt")),
      retry ? facts([["Error", (retry.error.code || "") + ": " + (retry.error.message || "")],
        ["Attempt", String(retry.attempt)], ["Waited", Number(retry.delay_s).toFixed(3) + " s"],
        ["Retry due", Toren.when(retry.next_attempt_at)]])
        : bar.fellBack ? facts([["Model", bar.fellBack.data.from_model],
          ["Error", (bar.fellBack.data.error.code || "") + ": " +
            (bar.fellBack.data.error.message || "")],
          ["Why", bar.fellBack.data.reason], ["Took over", bar.fellBack.data.to_model]])
          : el("p", { class: "muted" }, "Cut short: the call started again with no answer " +
          "recorded (a worker stopped while it was in flight)."));
    } else {
      parts.push(...modelDetail(bar, task));
    }
    detail.replaceChildren(el("div", { class: "wf-detail-head" }, close), ...parts);
    detail.hidden = false;
    detail.focus();
  }

  function modelDetail(bar, task) {
    const d = bar.completed && bar.completed.data;
    const step = bar.stepEntry;
    const head = el("h3", {}, "Task " + task.id + " · step " + bar.step + " · model call");
    const prompt = el("div", { class: "wf-system-prompt" }, el("span", { class: "muted" },
      "loading…"));
    systemPrompt(task).then((text) => {
      prompt.replaceChildren(text === null ? el("span", { class: "muted" }, "(not recorded)")
        : folded(text));
    }, (error) => {
      prompt.replaceChildren(el("span", { class: "error" }, error.message));
    });
    // what the model read this step besides the conversation so far: the task's input (step
    // 1), the results of the previous step's tool calls, or a user's message
    const read = [];
    if (bar.step === 1 && task.started) read.push(el("div", {}, "The task's input ", folded(
      task.started.data.input)));
    for (const result of task.toolResults.get(bar.step - 1) || []) {
      read.push(el("div", {}, "Result of " + result.data.name + " ", folded(result.data.output)));
    }
    for (const message of task.userMessages) {
      const previous = task.stepMap.get(String(bar.step - 1));
      const after = previous && previous.completed ? previous.completed.seq : 0;
      const before = bar.started ? bar.started.seq : Infinity;
      if (message.seq > after && message.seq < before) {
        read.push(el("div", {}, "User (turn " + message.data.turn + ") ",
          folded(message.data.text)));
      }
    }
    const retries = step.retries.map((r) => el("li", {}, "attempt " + r.event.data.attempt + ": " +
      (r.event.data.error.code || "") + ": " + (r.event.data.error.message || "") + "; waited " +
      Number(r.event.data.delay_s).toFixed(3) + " s"));
    return [head, d ? facts([["Model", d.model],
      ["Started", bar.started ? Toren.when(bar.started.created_at) : null],
      ["Rate limit", bar.started && bar.started.data.rate_limit_wait_s ? "waited " +
        Number(bar.started.data.rate_limit_wait_s).toFixed(1) + " s before it started" +
        (bar.started.data.rate_limited_by ? " (" + bar.started.data.rate_limited_by + ")" : "")
        : null],
      ["Latency", Number(d.latency_ms).toFixed(1) + " ms"],
      ["Tokens", d.usage.input_tokens + " in, " + d.usage.output_tokens + " out" +
        (d.usage.cache_read_tokens ? ", " + d.usage.cache_read_tokens + " read from the cache"
          : "")],
      ["Cost", money(d.cost_usd)], ["Stop reason", d.stop_reason],
      ["Repeated", d.repeated ? "after a crash" : null]])
      : el("p", { class: "muted" }, "Calling the model…"),
    retries.length ? part("Retries", el("ul", {}, retries)) : "",
    part("Prompt", el("div", { class: "muted" }, "System prompt"), prompt,
      read.length ? read : el("div", { class: "muted" }, "and the conversation so far")),
    part("Response", d ? (d.text ? folded(d.text) : el("span", { class: "muted" }, "(no text)"))
      : el("span", { class: "muted" }, "not yet")),
    d && d.tool_calls.length ? part("Tool calls asked for", d.tool_calls.map((call) =>
      el("div", {}, el("strong", {}, call.name), " ", folded(call.arguments)))) : ""];
  }

  // -- shown and hidden --------------------------------------------------------------------
  function visible(shown) {
    container.hidden = !shown;
    if (shown && waiting !== null) {
      const taken = waiting;
      waiting = null;
      for (const e of taken) event(e);
    }
    if (shown) {
      dirty = true;
      later();
      if (live && timer === null) timer = setInterval(tick, 250);
    } else if (timer !== null) {
      clearInterval(timer);
      timer = null;
    }
  }

  function stop() {
    if (timer !== null) clearInterval(timer);
    if (frame !== null) cancelAnimationFrame(frame);
    timer = null;
    frame = null;
  }

  return { event, end, visible, stop, timing, layout: () => { dirty = true; layout(); } };
};
