// The Toren console: a small client of the public HTTP API (no private endpoint), loaded by
// the page the server renders at "/". Pages live in pages/*.js, one file each, and register
// themselves with Toren.page(); this file holds what they share: the API key, JSON requests,
// uploads and files' content (fetched with the key, shown from blob: URLs), live event streams
// (Server-Sent Events read with fetch, so the key travels in a header and never in a URL), DOM
// building that only ever sets text (never HTML), and the router.
"use strict";

const Toren = (() => {
  const KEY_ITEM = "toren.apiKey";
  const pages = [];
  let cleanup = [];

  // -- DOM: every string goes in as text, so a model's "<script>" is shown, never run -------
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name === "class") node.className = value;
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  // A long value folded: the first lines shown, the rest behind a <details>.
  function folded(value, limit = 300) {
    const text = typeof value === "string" ? value : JSON.stringify(value, null, 2);
    if (text === undefined) return el("span", { class: "muted" }, "(none)");
    if (text.length <= limit) return el("pre", { class: "value" }, text);
    return el("details", { class: "value" },
      el("summary", {}, text.slice(0, limit).replace(/\s+/g, " ") + " … (" +
        text.length.toLocaleString() + " characters)"),
      el("pre", {}, text));
  }

  // The CLI's money format (toren jobs show, toren run): dollars to four decimals.
  function money(value) {
    if (value === null || value === undefined) return "cost unknown";
    return "$" + Number(value).toFixed(4);
  }

  function when(iso) {
    if (!iso) return "";
    const date = new Date(iso);
    return isNaN(date) ? String(iso) : date.toLocaleString();
  }

  function status(value) {
    return el("span", { class: "status status-" + String(value).replace(/[^a-z_]/g, "") },
      String(value));
  }

  // -- the API ------------------------------------------------------------------------------
  class ApiError extends Error {
    constructor(status, code, message, body) {
      super(message);
      this.status = status;
      this.code = code;
      this.body = body || {};  // the whole JSON error body (a 409's first decision, say)
    }
  }

  function apiKey() { return sessionStorage.getItem(KEY_ITEM) || ""; }

  function headers(extra) {
    const result = Object.assign({ Accept: "application/json" }, extra || {});
    const key = apiKey();
    if (key) result.Authorization = "Bearer " + key;
    return result;
  }

  async function api(method, path, body) {
    const init = { method, headers: headers(body === undefined ? {} :
      { "Content-Type": "application/json" }), credentials: "omit", cache: "no-store" };
    if (body !== undefined) init.body = JSON.stringify(body);
    return answer(await fetch(path, init));
  }

  // A response's JSON, or the ApiError its error body says (asking for a key on a 401).
  async function answer(response) {
    let data = null;
    try { data = await response.json(); } catch (_) { data = null; }
    if (!response.ok) throw failure(response, data);
    return data;
  }

  function failure(response, data) {
    const error = (data && data.error) || {};
    if (response.status === 401) askForKey(error.message);
    return new ApiError(response.status, error.code || "http_error",
      error.message || response.statusText, data);
  }

  // -- files: uploads (POST /files) and content (GET /files/{id}/content, fetched with the
  // key and shown from a blob: URL, so the key never goes in a URL) --------------------------
  async function upload(file) {
    const form = new FormData();
    form.append("file", file, file.name);
    return answer(await fetch("/files", { method: "POST", headers: headers(), body: form,
      credentials: "omit", cache: "no-store" }));
  }

  // Upload every file of a file input, in order; onEach(file) before each. The records.
  async function uploadAll(input, onEach) {
    const stored = [];
    for (const file of Array.from(input.files || [])) {
      if (onEach) onEach(file);
      stored.push(await upload(file));
    }
    return stored;
  }

  const fileUrls = new Map();  // file id -> Promise of a blob: URL, for the page shown
  function fileUrl(fileId) {
    if (!fileUrls.has(fileId)) {
      fileUrls.set(fileId, (async () => {
        const response = await fetch("/files/" + encodeURIComponent(fileId) + "/content",
          { headers: headers({ Accept: "*/*" }), credentials: "omit" });
        if (!response.ok) throw failure(response, await response.json().catch(() => null));
        return URL.createObjectURL(await response.blob());
      })());
      fileUrls.get(fileId).catch(() => fileUrls.delete(fileId));  // a later view tries again
    }
    return fileUrls.get(fileId);
  }

  function forgetFileUrls() {
    for (const pending of fileUrls.values()) {
      pending.then((url) => URL.revokeObjectURL(url), () => {});
    }
    fileUrls.clear();
  }

  // The files shown to the model with a message or a tool result (an event's attachments):
  // a thumbnail per image (click: full size), a link per PDF (click: download it).
  function attachments(list) {
    if (!list || !list.length) return null;
    return el("div", { class: "attachments" }, list.map(attachment));
  }

  function attachment(a) {
    const shape = a.width && a.height ? a.width + "x" + a.height + " px" :
      a.pages ? a.pages + (a.pages === 1 ? " page" : " pages") : "";
    const label = a.name + (shape ? " (" + shape + ")" : "");
    if (a.content_type === "application/pdf") {
      const link = el("a", { class: "attachment pdf", href: "#", "data-file": a.file_id,
        title: "Download " + a.name }, "PDF: " + label);
      link.addEventListener("click", async (event) => {
        if (link.dataset.ready) return;  // its href is the content now: the browser saves it
        event.preventDefault();
        try {
          link.href = await fileUrl(a.file_id);
          link.download = a.name;
          link.dataset.ready = "1";
          link.click();
        } catch (error) {
          link.append(el("span", { class: "error" }, " (" + error.message + ")"));
        }
      });
      return link;
    }
    const image = el("img", { class: "thumb", alt: a.name, title: label });
    image.addEventListener("click", () => image.classList.toggle("large"));
    fileUrl(a.file_id).then((url) => { image.src = url; }, (error) => {
      image.replaceWith(el("span", { class: "muted" }, "(" + error.message + ")"));
    });
    return el("figure", { class: "attachment image", "data-file": a.file_id }, image,
      el("figcaption", {}, label));
  }

  // The run's events, then live ones: onEvent(event) for each (once, in order), onText(piece)
  // for each piece of model text as it is generated (best-effort). Reconnects from the last
  // event's cursor. Returns a function that stops it.
  function follow(runId, handlers) {
    const controller = new AbortController();
    let cursor = handlers.after || null;
    let stopped = false;
    (async () => {
      let failures = 0;
      while (!stopped) {
        try {
          const extra = { Accept: "text/event-stream" };
          if (cursor) extra["Last-Event-ID"] = cursor;
          const response = await fetch("/runs/" + encodeURIComponent(runId) + "/events",
            { headers: headers(extra), signal: controller.signal, credentials: "omit",
              cache: "no-store" });
          if (!response.ok) {
            const data = await response.json().catch(() => ({}));
            const error = (data && data.error) || {};
            if (response.status === 401) askForKey(error.message);
            throw new ApiError(response.status, error.code || "http_error", error.message);
          }
          for await (const frame of frames(response.body)) {
            failures = 0;
            if (frame.event === "end") {
              if (handlers.onEnd) handlers.onEnd(JSON.parse(frame.data || "{}"));
              return;
            }
            if (frame.event === "error") {  // the stream's key was revoked: ask for another
              const error = (JSON.parse(frame.data || "{}").error) || {};
              askForKey(error.message);
              if (handlers.onError) {
                handlers.onError(new ApiError(401, error.code || "stream_error", error.message));
              }
              return;
            }
            const data = JSON.parse(frame.data || "{}");
            if (frame.event === "text_delta") {
              if (handlers.onText) handlers.onText(data);
              continue;
            }
            if (frame.id) cursor = frame.id;
            handlers.onEvent(data);
          }
        } catch (error) {
          if (stopped || error.name === "AbortError") return;
          if (error instanceof ApiError && error.status < 500 && error.status !== 429) {
            if (handlers.onError) handlers.onError(error);
            return;
          }
          failures += 1;
          await new Promise((resolve) => setTimeout(resolve, Math.min(5000, 250 * 2 ** failures)));
        }
      }
    })();
    return () => { stopped = true; controller.abort(); };
  }

  async function* frames(body) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let frame = {};
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let newline;
      while ((newline = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, newline).replace(/\r$/, "");
        buffer = buffer.slice(newline + 1);
        if (line === "") {
          if (Object.keys(frame).length) yield frame;
          frame = {};
        } else if (!line.startsWith(":")) {
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          let value = colon < 0 ? "" : line.slice(colon + 1);
          if (value.startsWith(" ")) value = value.slice(1);
          frame[field] = field === "data" && frame.data !== undefined ?
            frame.data + "\n" + value : value;
        }
      }
    }
  }

  // -- the API key: entered once, kept for this browser tab's session only -------------------
  function askForKey(message) {
    const dialog = document.getElementById("key-dialog");
    document.getElementById("key-message").textContent = message ||
      "This server needs an API key.";
    if (!dialog.open) dialog.showModal();
    document.getElementById("key-input").focus();
  }

  function setUpKeyDialog() {
    const form = document.getElementById("key-form");
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const value = document.getElementById("key-input").value.trim();
      if (value) sessionStorage.setItem(KEY_ITEM, value);
      document.getElementById("key-input").value = "";
      document.getElementById("key-dialog").close();
      granted = null;
      route();
      loadScopes();
    });
    document.getElementById("forget-key").addEventListener("click", () => {
      sessionStorage.removeItem(KEY_ITEM);
      granted = null;
      route();
    });
  }

  // -- pages and the router -----------------------------------------------------------------
  // A page: { id, title, nav (shown in the menu), order (its place there), path (a RegExp
  // over the hash, its groups passed to render), render(root, params, ctx) }.
  // ctx.onLeave(fn) registers clean-up.
  // `available` (optional, async) decides whether the page appears (a feature not served).
  function page(definition) { pages.push(definition); }

  async function buildNav() {
    const nav = document.getElementById("nav");
    nav.replaceChildren();
    const menu = pages.filter((p) => p.nav).sort((a, b) => (a.order || 50) - (b.order || 50));
    for (const definition of menu) {
      let shown = true;
      if (definition.available) {
        try { shown = await definition.available(); } catch (_) { shown = false; }
      }
      if (shown) {
        nav.append(el("a", { href: "#/" + definition.id, "data-page": definition.id },
          definition.title));
      }
    }
  }

  // -- what the key may do (GET /me): controls needing a scope it lacks are disabled, their
  // title naming the scope; the API refuses them anyway (403 forbidden, shown as an error) --
  const CONTROL_SCOPES = [
    ["#start-run, #cancel-run", "runs:write"],
    ["#upgrade-run, button.restore, #fork-run", "runs:manage"],
    ["#start-session, #send, #close-session", "sessions:write"],
    ["button[class^='decide-'], .answer-choice, .answer-submit", "approvals:decide"],
    ["button[class^='schedule-']", "schedules:write"],
  ];
  let granted = null;  // the key's scopes (null: not known yet)

  async function loadScopes() {
    try {
      const me = await api("GET", "/me");
      granted = new Set(me.scopes || []);
      // a server without keys (local development) has no key to forget
      document.getElementById("forget-key").hidden = !me.keys_required;
    } catch (_) {
      granted = null;  // no key yet, or an older server: leave every control as it is
    }
    applyScopes(document.getElementById("main"));
  }

  function may(scope) { return granted === null || granted.has(scope); }

  function applyScopes(root) {
    if (!root || granted === null) return;
    for (const [selector, scope] of CONTROL_SCOPES) {
      for (const control of root.querySelectorAll(selector)) {
        if (may(scope) || control.dataset.needsScope) continue;
        control.disabled = true;
        control.dataset.needsScope = scope;
        control.title = "This API key may not do this: it needs the scope " + scope;
      }
    }
  }

  function route() {
    for (const fn of cleanup.splice(0)) {
      try { fn(); } catch (_) { /* a page's clean-up must not stop the next page */ }
    }
    forgetFileUrls();
    const hash = location.hash.replace(/^#/, "") || "/runs";
    const root = document.getElementById("main");
    root.replaceChildren();
    for (const definition of pages) {
      const match = definition.path.exec(hash);
      if (!match) continue;
      for (const link of document.querySelectorAll("#nav a")) {
        link.classList.toggle("active", link.dataset.page === (definition.section ||
          definition.id));
      }
      const ctx = { onLeave: (fn) => cleanup.push(fn) };
      Promise.resolve(definition.render(root, match.slice(1).map(decodeURIComponent), ctx))
        .catch((error) => showError(root, error));
      return;
    }
    root.append(el("p", {}, "No such page. ", el("a", { href: "#/runs" }, "Runs")));
  }

  function showError(root, error) {
    root.append(el("p", { class: "error", role: "alert" },
      error instanceof ApiError ? error.code + ": " + error.message : String(error)));
  }

  function every(ms, fn, ctx) {
    const timer = setInterval(fn, ms);
    ctx.onLeave(() => clearInterval(timer));
  }

  document.addEventListener("DOMContentLoaded", () => {
    setUpKeyDialog();
    buildNav().then(route).then(loadScopes);
    window.addEventListener("hashchange", route);
    new MutationObserver(() => applyScopes(document.getElementById("main")))
      .observe(document.getElementById("main"), { childList: true, subtree: true });
  });

  return { el, folded, money, when, status, api, follow, page, every, showError, ApiError, may,
    upload, uploadAll, fileUrl, attachments };
})();
