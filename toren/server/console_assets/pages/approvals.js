// Approvals: the tool calls waiting for a person (GET /approvals?status=pending), each with its
// tool and arguments, approved or denied with an optional reason (POST /approvals/{id}/approve
// or /deny); someone else's earlier decision (409) is shown as it was made. Refreshed every two
// seconds without touching a row being edited; hidden when the server serves no /approvals.
"use strict";

Toren.page({
  id: "approvals",
  title: "Approvals",
  nav: true,
  order: 30,
  path: /^\/approvals\/?$/,
  async available() {
    try {
      await Toren.api("GET", "/approvals?limit=1");
    } catch (error) {
      return !(error instanceof Toren.ApiError && error.status === 404);
    }
    return true;
  },
  async render(root, _params, ctx) {
    const { el, api, folded } = Toren;
    const list = el("div", { id: "approvals-list" });
    const empty = el("p", { class: "muted", id: "approvals-empty" }, "Nothing waits for approval.");
    const decided = el("div", { id: "approvals-decided" });
    root.append(el("h1", {}, "Approvals"),
      el("p", { class: "muted" }, "Tool calls waiting for a person. A decision is made once: " +
        "the run continues (approved) or its model reads the reason (denied)."),
      list, empty, el("h2", {}, "Decided here"), decided);
    const rows = new Map();  // approval id -> its card, kept while pending so typing survives

    function outcomeText(record) {
      return record.status + (record.decided_by ? " by " + record.decided_by : "") +
        (record.reason ? ": " + record.reason : "");
    }

    function card(record) {
      const reason = el("input", { type: "text", class: "approval-reason", maxlength: 2000,
        placeholder: "reason (optional)", "aria-label": "Reason" });
      const result = el("div", { class: "approval-result", role: "status" });
      const node = el("section", { class: "approval", "data-approval": record.id },
        el("div", { class: "approval-head" }, el("strong", { class: "approval-tool" },
          record.tool), " · agent ", record.agent, " · run ",
        el("a", { href: "#/runs/" + encodeURIComponent(record.run_id) },
          record.run_id.slice(0, 8)), " · task " + record.task_id),
        el("div", { class: "muted" }, "requested " + Toren.when(record.requested_at) +
          (record.expires_at ? " · expires " + Toren.when(record.expires_at) : "") +
          (record.approvers.length ? " · approvers: " + record.approvers.join(", ") :
            " · anyone may decide")),
        el("div", { class: "args" }, "arguments ", folded(record.arguments)),
        el("div", { class: "approval-actions" }, reason,
          decideButton("approve", "Approve"), decideButton("deny", "Deny")),
        result);

      function decideButton(action, label) {
        return el("button", { type: "button", class: "decide-" + action, onclick: async () => {
          for (const button of node.querySelectorAll("button")) button.disabled = true;
          const body = reason.value.trim() ? { reason: reason.value.trim() } : {};
          let shown;
          try {
            shown = await api("POST", "/approvals/" + encodeURIComponent(record.id) + "/" +
              action, body);
            result.replaceChildren(el("span", { class: "decided" }, outcomeText(shown)));
          } catch (error) {
            if (!(error instanceof Toren.ApiError)) throw error;
            if (error.status === 409 && error.body.approval) {
              shown = error.body.approval;
              result.replaceChildren(el("span", { class: "warn already-decided" },
                "Already decided: " + outcomeText(shown)));
            } else {
              result.replaceChildren(el("span", { class: "error" },
                error.code + ": " + error.message));
              for (const button of node.querySelectorAll("button")) button.disabled = false;
              return;
            }
          }
          rows.delete(record.id);
          node.querySelector(".approval-actions").remove();
          decided.prepend(node);
        } }, label);
      }
      return node;
    }

    async function refresh() {
      const { approvals } = await api("GET", "/approvals?status=pending&limit=100");
      const pending = new Set(approvals.map((a) => a.id));
      for (const [id, node] of rows) {
        if (!pending.has(id)) { node.remove(); rows.delete(id); }
      }
      for (const record of approvals) {
        if (!rows.has(record.id)) {
          const node = card(record);
          rows.set(record.id, node);
          list.append(node);
        }
      }
      empty.hidden = rows.size > 0;
    }
    await refresh();
    Toren.every(2000, () => refresh().catch(() => {}), ctx);
  },
});
