// Sessions: start a conversation with any agent, watch it think live (its text as it is
// generated, tool calls as they start and finish), send the next turn when it waits for
// one (with files attached: thumbnails of the images the model was shown), answer a question
// the agent asks (ask_user: the next message is the answer), close it. A reload
// shows the whole transcript (the session's events, replayed).
"use strict";

Toren.page({
  id: "sessions",
  title: "Sessions",
  nav: true,
  order: 20,
  path: /^\/sessions\/?$/,
  async render(root, _params, ctx) {
    const { el, api } = Toren;
    const agents = (await api("GET", "/agents")).agents;
    const choose = el("select", { id: "session-agent" },
      agents.map((a) => el("option", { value: a.name }, a.name)));
    const start = el("button", { type: "submit", id: "start-session" }, "Start a session");
    const form = el("form", { class: "filters" }, "Talk to ", choose, " ", start);
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      start.disabled = true;
      try {
        const created = await api("POST", "/sessions", { agent: choose.value });
        location.hash = "#/sessions/" + encodeURIComponent(created.id);
      } catch (error) {
        start.disabled = false;
        Toren.showError(root, error);
      }
    });
    const body = el("tbody", {});
    root.append(el("h1", {}, "Sessions"), form, el("h2", {}, "Recent sessions"),
      el("table", { class: "list" }, el("thead", {}, el("tr", {},
        ["Session", "Agent", "Status", "Started"].map((h) => el("th", {}, h)))), body));
    async function refresh() {
      const { runs } = await api("GET", "/runs?kind=session&limit=20");
      body.replaceChildren(...runs.map((run) => el("tr", {},
        el("td", {}, el("a", { href: "#/sessions/" + run.id }, run.id.slice(0, 8))),
        el("td", {}, run.agent), el("td", {}, Toren.status(run.status)),
        el("td", {}, Toren.when(run.created_at)))));
    }
    await refresh();
    Toren.every(3000, () => refresh().catch(() => {}), ctx);
  },
});

Toren.page({
  id: "session",
  section: "sessions",
  title: "Session",
  path: /^\/sessions\/([0-9a-fA-F-]{36})$/,
  async render(root, [sessionId], ctx) {
    const { el, api } = Toren;
    const found = await api("GET", "/sessions/" + encodeURIComponent(sessionId));
    const chat = el("div", { class: "chat", id: "chat", "aria-live": "polite" });
    const state = el("span", { id: "session-status" }, Toren.status(found.status));
    const input = el("textarea", { id: "message", rows: 3, placeholder: "Your message" });
    const files = el("input", { type: "file", id: "message-files", multiple: true });
    const send = el("button", { type: "submit", id: "send" }, "Send");
    const close = el("button", { type: "button", id: "close-session" }, "Close session");
    const note = el("span", { id: "composer-status", class: "muted", role: "status" });
    const form = el("form", { class: "composer", id: "composer" }, input,
      el("label", { class: "attach" }, "Attach files ", files), send, close, note);
    const details = el("details", { class: "session-tree" }, el("summary", {}, "Timeline"));
    root.append(el("h1", {}, "Session with ", found.agent, " ", state), chat, form, details);
    const bubbles = new Map();
    let current = found.status;

    function setStatus(value) {
      current = value;
      state.replaceChildren(Toren.status(value));
      const ended = ["completed", "stopped", "failed", "cancelled"].includes(value);
      send.disabled = value !== "awaiting_input";
      close.disabled = ended;
      input.disabled = ended;
      files.disabled = ended;
    }
    setStatus(found.status);

    function bubble(key, who) {
      if (!bubbles.has(key)) {
        const text = el("div", { class: "bubble-text" });
        const shown = el("div", { class: "bubble-files" });
        const node = el("div", { class: "bubble " + who, "data-key": key }, text, shown);
        chat.append(node);
        bubbles.set(key, { node, text, shown });
      }
      return bubbles.get(key);
    }
    const conversation = {
      text(piece) {
        const b = bubble(piece.task_id + "/" + piece.step, "agent streaming");
        b.text.append(document.createTextNode(piece.text));
      },
      completed(event) {
        const b = bubble(event.stream.replace(/^task:/, "") + "/" + event.data.step, "agent");
        b.node.classList.remove("streaming");
        b.text.replaceChildren(event.data.text);
        if (!event.data.text) b.node.classList.add("empty");
      },
      toolStarted(event) {
        const b = bubble("tool/" + event.data.call_id, "tool");
        b.text.replaceChildren(el("strong", {}, event.data.name), " running…");
      },
      toolCompleted(event) {
        const d = event.data;
        const b = bubble("tool/" + d.call_id, "tool" + (d.is_error ? " error" : ""));
        b.text.replaceChildren(el("strong", {}, d.name), " ", Toren.folded(d.output, 200));
        b.shown.replaceChildren(Toren.attachments(d.attachments) || "");
      },
      user(event) {
        const b = bubble("user/" + event.data.turn, "user");
        b.text.replaceChildren(event.data.text);
        b.shown.replaceChildren(Toren.attachments(event.data.attachments) || "");
      },
    };
    const timeline = Toren.timeline(details, { conversation });

    // a message: its text and the files chosen (uploaded first); files alone are a message
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const text = input.value.trim();
      const chosen = (files.files || []).length;
      if ((!text && !chosen) || current !== "awaiting_input") return;
      send.disabled = true;
      try {
        const stored = await Toren.uploadAll(files, (file) =>
          note.replaceChildren("Uploading " + file.name + "…"));
        const body = { text };
        if (stored.length) body.files = stored.map((file) => file.id);
        await api("POST", "/sessions/" + encodeURIComponent(sessionId) + "/messages", body);
        input.value = "";
        files.value = "";
        note.replaceChildren();
        setStatus("running");
      } catch (error) {
        note.replaceChildren();
        setStatus(current);
        Toren.showError(chat, error);
      }
    });
    close.addEventListener("click", async () => {
      close.disabled = true;
      try {
        await api("POST", "/sessions/" + encodeURIComponent(sessionId) + "/messages",
          { close: true });
      } catch (error) {
        Toren.showError(chat, error);
      }
    });
    ctx.onLeave(Toren.follow(sessionId, {
      onEvent: (event) => {
        timeline.event(event);
        if (event.type === "QuestionAsked") {  // ask_user: the next message answers it
          const d = event.data;
          const b = bubble("question/" + d.question_id, "agent question");
          b.text.replaceChildren(el("strong", {}, "The agent asks: "), d.question,
            (d.choices || []).length ? el("div", { class: "muted" }, "Choices: " +
              d.choices.map((choice, i) => (i + 1) + ". " + choice).join("  ")) : "");
          input.placeholder = "Your answer";
          setStatus("awaiting_input");
        } else if (event.type === "QuestionAnswered") {
          input.placeholder = "Your message";
          setStatus("running");
        } else if (event.type === "TurnEnded") setStatus("awaiting_input");
        else if (event.type === "UserMessage" || event.type === "CloseRequested") {
          setStatus("running");
        } else if (event.type === "RunFinished") setStatus(event.data.status);
        else if (event.type === "RunCancelled") setStatus("cancelled");
      },
      onText: (piece) => timeline.text(piece),
      onEnd: (end) => setStatus(end.status),
      onError: (error) => Toren.showError(root, error),
    }));
  },
});
