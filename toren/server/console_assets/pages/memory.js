// Memory: what agents with memory: keep (GET /memories), newest change first or best match
// first with a search, filtered by agent and subject (whom a memory is about); a person erases
// one memory (DELETE /memories/{id}) or everything kept about a subject
// (DELETE /memories?subject=). See docs/guides/memory.md.
"use strict";

Toren.page({
  id: "memory",
  title: "Memory",
  nav: true,
  order: 35,
  path: /^\/memory\/?(?:\?(.*))?$/,
  async render(root, [query], ctx) {
    const { el, api } = Toren;
    const params = new URLSearchParams(query || "");
    const agents = (await api("GET", "/agents")).agents.map((a) => a.name);
    const form = el("form", { class: "filters", id: "memory-filters" },
      el("select", { name: "agent", id: "memory-agent" },
        el("option", { value: "" }, "any agent"),
        agents.map((v) => el("option", { value: v, selected: params.get("agent") === v }, v))),
      el("input", { name: "subject", id: "memory-subject", placeholder: "subject (telegram:42)",
        value: params.get("subject") || "", maxlength: "200" }),
      el("input", { name: "q", id: "memory-search", placeholder: "search words",
        value: params.get("q") || "", maxlength: "1000" }),
      el("button", { type: "submit" }, "Search"));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const next = new URLSearchParams();
      for (const [name, value] of new FormData(form)) if (value) next.set(name, value);
      location.hash = "#/memory" + (next.toString() ? "?" + next : "");
    });
    const body = el("tbody", { id: "memory-body" });
    const notes = el("div", { id: "memory-notes" });
    const eraseAll = el("button", { type: "button", id: "memory-erase-subject",
      hidden: !params.get("subject") }, "Erase everything about " + (params.get("subject") || ""));
    root.append(el("h1", {}, "Memory"),
      el("p", { class: "muted" }, "What agents remember beyond a session, about whom. Erasing " +
        "is final: the agent never recalls an erased memory again (toren memory rm)."),
      form, eraseAll, notes,
      el("table", { class: "list" },
        el("thead", {}, el("tr", {}, ["Memory", "Agent", "Scope", "Subject", "Pinned",
          "Changed", "Content", ""].map((h) => el("th", {}, h)))),
        body));

    async function act(method, path, done) {
      try {
        const answer = await api(method, path);
        notes.replaceChildren(el("p", { class: "notice", role: "status" }, done(answer)));
      } catch (error) {
        notes.replaceChildren();
        Toren.showError(notes, error);
      }
      await refresh();
    }

    eraseAll.addEventListener("click", () => {
      const subject = params.get("subject");
      const search = new URLSearchParams({ subject });
      if (params.get("agent")) search.set("agent", params.get("agent"));
      act("DELETE", "/memories?" + search,
        (answer) => "Erased " + answer.erased.length + " memories about " + subject + ".");
    });

    async function refresh() {
      const search = new URLSearchParams({ limit: "100" });
      for (const name of ["agent", "subject", "q"]) {
        if (params.get(name)) search.set(name, params.get(name));
      }
      const { memories } = await api("GET", "/memories?" + search);
      body.replaceChildren(...memories.map((memory) => {
        const button = el("button", { type: "button", class: "erase" }, "Erase");
        button.addEventListener("click", () => {
          button.disabled = true;
          act("DELETE", "/memories/" + encodeURIComponent(memory.id),
            () => "Erased memory " + memory.id.slice(0, 8) + ".");
        });
        return el("tr", { "data-memory": memory.id },
          el("td", {}, memory.id.slice(0, 8)), el("td", {}, memory.agent),
          el("td", {}, memory.scope), el("td", {}, memory.subject || ""),
          el("td", {}, memory.pinned ? "pinned" : ""), el("td", {}, Toren.when(memory.updated_at)),
          el("td", { class: "content" }, memory.content),
          el("td", {}, button));
      }));
      if (!memories.length) body.append(el("tr", {}, el("td", { colspan: 8, class: "muted" },
        "No memories match.")));
    }
    await refresh();
    Toren.every(5000, () => refresh().catch(() => {}), ctx);
  },
});
