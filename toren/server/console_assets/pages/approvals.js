// Approvals: the tool calls waiting for a person (GET /approvals?status=pending), each with its
// tool, arguments and their digest, decided with an optional reason: approve (once, or always
// for the same call in the run), deny, edit the arguments (JSON in a textarea) or answer in the
// tool's stead (POST /approvals/{id}/approve|deny|edit|answer, each naming the digest shown).
// Someone else's earlier decision (409) is shown as it was made; arguments that changed under
// the card (409 approval_stale) redraw it. Refreshed every two seconds without touching a row
// being edited; hidden when the server serves no /approvals.
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
      el("p", { class: "muted" }, "Tool calls waiting for a person. A decision is made once, " +
        "on the arguments shown: the call runs (approved, or edited with your arguments), " +
        "your answer is its result and the tool does not run (answered), or its model reads " +
        "the reason (denied)."),
      list, empty, el("h2", {}, "Decided here"), decided);
    const rows = new Map();  // approval id -> its card, kept while pending so typing survives

    function outcomeText(record) {
      return record.status + (record.scope === "run" ? " always" : "") +
        (record.decided_by ? " by " + record.decided_by : "") +
        (record.reason ? ": " + record.reason : "");
    }

    function card(record, note) {
      const reason = el("input", { type: "text", class: "approval-reason", maxlength: 2000,
        placeholder: "reason (optional)", "aria-label": "Reason" });
      const editArgs = el("textarea", { class: "approval-edit-args", rows: 4, spellcheck: "false",
        "aria-label": "Edited arguments (JSON)" });
      editArgs.value = JSON.stringify(record.arguments, null, 2);
      const answerText = el("textarea", { class: "approval-answer-text", rows: 2,
        maxlength: 100000, placeholder: "the tool's result, as the model will read it",
        "aria-label": "Answer" });
      const result = el("div", { class: "approval-result", role: "status" });
      const escalated = record.escalation_level > 0 ? " · escalated " +
        Toren.when(record.escalated_at) : "";
      const node = el("section", { class: "approval", "data-approval": record.id },
        el("div", { class: "approval-head" }, el("strong", { class: "approval-tool" },
          record.tool), " · agent ", record.agent, " · run ",
        el("a", { href: "#/runs/" + encodeURIComponent(record.run_id) },
          record.run_id.slice(0, 8)), " · task " + record.task_id),
        el("div", { class: "muted" }, "requested " + Toren.when(record.requested_at) +
          (record.expires_at ? " · expires " + Toren.when(record.expires_at) : "") +
          (record.expires_at && record.on_expiry === "escalate" && !record.escalation_level ?
            " (then escalates to " + record.escalate_to.join(", ") + ")" : "") + escalated +
          (record.reminded_at ? " · reminded " + Toren.when(record.reminded_at) : "") +
          (record.approvers.length ? " · approvers: " + record.approvers.join(", ") :
            " · anyone may decide")),
        note ? el("div", { class: "warn approval-note" }, note) : "",
        el("div", { class: "args" }, "arguments ", folded(record.arguments)),
        el("div", { class: "muted approval-digest", title: record.digest },
          "digest " + record.digest.slice(0, 12) + "…"),
        el("div", { class: "approval-actions" }, reason,
          decideButton("approve", "Approve", () => ({})),
          decideButton("approve", "Approve always", () => ({ scope: "run" }), "decide-always"),
          decideButton("deny", "Deny", () => ({}))),
        el("details", { class: "approval-more" }, el("summary", {}, "Edit or answer"),
          el("label", {}, "Run it with these arguments instead (JSON):"), editArgs,
          el("div", { class: "approval-actions" }, decideButton("edit", "Edit and run", () => {
            try {
              return { arguments: JSON.parse(editArgs.value) };
            } catch (error) {
              throw new Error("the arguments are not JSON: " + error.message);
            }
          })),
          el("label", {}, "Or answer in the tool's stead (it does not run):"), answerText,
          el("div", { class: "approval-actions" }, decideButton("answer", "Answer",
            () => ({ answer: answerText.value })))),
        result);

      function decideButton(action, label, fields, className) {
        return el("button", { type: "button", class: className || "decide-" + action,
          onclick: async () => {
            let body;
            try {
              body = { ...fields(), digest: record.digest };
            } catch (error) {
              result.replaceChildren(el("span", { class: "error" }, error.message));
              return;
            }
            if (reason.value.trim()) body.reason = reason.value.trim();
            for (const button of node.querySelectorAll("button")) button.disabled = true;
            let shown;
            try {
              shown = await api("POST", "/approvals/" + encodeURIComponent(record.id) + "/" +
                action, body);
              result.replaceChildren(el("span", { class: "decided" }, outcomeText(shown)));
            } catch (error) {
              if (!(error instanceof Toren.ApiError)) throw error;
              if (error.code === "approval_stale" && error.body.approval) {
                // the arguments are not the ones this card showed: show the current ones
                const fresh = card(error.body.approval, "The arguments changed since this " +
                  "was shown; nothing was decided. Decide on these.");
                rows.set(record.id, fresh);
                node.replaceWith(fresh);
                return;
              }
              if (error.status === 409 && error.body.approval) {
                shown = error.body.approval;
                result.replaceChildren(el("span", { class: "warn already-decided" },
                  "Already decided: " + outcomeText(shown)));
              } else {
                result.replaceChildren(el("span", { class: "error" },
                  error.code + ": " + error.message +
                  (error.body && error.body.field ? " (field " + error.body.field + ")" : "")));
                for (const button of node.querySelectorAll("button")) button.disabled = false;
                return;
              }
            }
            rows.delete(record.id);
            for (const part of node.querySelectorAll(".approval-actions, .approval-more")) {
              part.remove();
            }
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
        const shown = rows.get(record.id);
        // an escalation changes who decides: redraw a card nobody is typing in
        if (shown && shown.dataset.level !== String(record.escalation_level) &&
            !shown.contains(document.activeElement)) {
          const fresh = card(record);
          fresh.dataset.level = String(record.escalation_level);
          shown.replaceWith(fresh);
          rows.set(record.id, fresh);
        } else if (!shown) {
          const node = card(record);
          node.dataset.level = String(record.escalation_level);
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
