/* The Helix chat: one for each element with `data-helix-chat` (templates/chat/widget.html).
 *
 * The transcript is the session's stored messages as of a snapshot (GET .../snapshot), then the
 * stream's chunks after the snapshot's `streamSequence`, read from the session's WebSocket. The
 * chat keeps the sequence of the last chunk it rendered and reconnects from there, so a dropped
 * socket neither repeats nor loses a chunk; a reload starts again from a fresh snapshot, which
 * holds what the stream held up to it. The agent's state comes from its state WebSocket.
 */
"use strict";

(() => {
  const RECONNECT_FIRST_MS = 250;
  const RECONNECT_MAX_MS = 5000;
  // Chunks that follow a step's commit, after which the agent's state may be new.
  const COMMITS = new Set([
    "step_start", "run_resumed", "run_completed", "run_suspended", "run_interrupted", "run_failed",
  ]);
  const RUN_STATUS = {
    step_start: "running",
    run_resumed: "running",
    run_completed: "completed",
    run_suspended: "suspended",
    run_interrupted: "interrupted",
    run_failed: "failed",
  };

  // agents_app.definitions.registry.kebab_case, as the agents npm client names agents in URLs.
  function kebabCase(name) {
    if (name.toUpperCase() === name && name.toLowerCase() !== name) {
      return name.toLowerCase().replaceAll("_", "-");
    }
    let kebab = name.replace(/[A-Z]/g, (capital) => "-" + capital.toLowerCase());
    if (kebab.startsWith("-")) kebab = kebab.slice(1);
    kebab = kebab.replaceAll("_", "-");
    return kebab.endsWith("-") ? kebab.slice(0, -1) : kebab;
  }

  // crypto.randomUUID needs a secure context; getRandomValues does not.
  function newSessionId() {
    const bytes = crypto.getRandomValues(new Uint8Array(16));
    return Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("");
  }

  function socketUrl(path) {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    return `${scheme}//${location.host}${path}`;
  }

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function json(value) {
    return typeof value === "string" ? value : JSON.stringify(value, null, 2);
  }

  function statusOf(session) {
    if (session.isExecuting) return "running";
    return session.status.startsWith("suspended") ? "suspended" : session.status;
  }

  class Chat {
    constructor(root) {
      this.root = root;
      this.agentType = root.dataset.agentType;
      this.sessionId = root.dataset.sessionId || null; // A new chat gets one with its first message.
      this.csrfToken = root.dataset.csrfToken;
      this.sessionsUrl = root.dataset.sessionsUrl;
      this.chatUrl = root.dataset.chatUrl;
      this.pageUrl = root.dataset.pageUrl || null;
      this.transcript = root.querySelector("[data-role=transcript]");
      this.stateView = root.querySelector("[data-role=state]");
      this.statusView = root.querySelector("[data-role=status]");
      this.errorView = root.querySelector("[data-role=error]");
      this.composer = root.querySelector("[data-role=composer]");
      this.buttons = {};
      for (const button of root.querySelectorAll("[data-action]")) {
        this.buttons[button.dataset.action] = button;
        button.addEventListener("click", () => this.control(button.dataset.action));
      }
      this.composer.addEventListener("submit", (event) => {
        event.preventDefault();
        this.send();
      });
      this.composer.message.addEventListener("keydown", (event) => {
        if (event.key === "Enter" && !event.shiftKey) {
          event.preventDefault();
          this.composer.requestSubmit();
        }
      });
      // What the transcript is drawn from: the snapshot's messages and pending calls, then the
      // entries after it, in order: stream chunks, and the messages sent from here.
      this.messages = [];
      this.pending = {};
      this.entries = [];
      this.baseSequence = 0;
      this.lastSequence = 0;
      this.tools = new Map(); // Tool call parts by call id.
      this.socket = null;
      this.stateSocket = null;
      this.busy = false;
      this.streamDelay = RECONNECT_FIRST_MS;
      this.stateDelay = RECONNECT_FIRST_MS;
      this.setStatus("new");
      if (this.sessionId) this.load();
    }

    sessionApi(action) {
      return `${this.sessionsUrl}${encodeURIComponent(this.sessionId)}/${action}`;
    }

    async request(url, body) {
      const init = { credentials: "same-origin", headers: { Accept: "application/json" } };
      if (body !== undefined) {
        init.method = "POST";
        init.headers["Content-Type"] = "application/json";
        init.headers["X-CSRFToken"] = this.csrfToken;
        init.body = JSON.stringify(body);
      }
      const response = await fetch(url, init);
      const text = await response.text();
      const data = text ? JSON.parse(text) : null;
      if (!response.ok) {
        throw new Error(data?.error?.message || `${response.status} ${response.statusText}`);
      }
      return data;
    }

    async load() {
      this.stopFollowing();
      let snapshot, session;
      try {
        [snapshot, session] = await Promise.all([
          this.request(this.sessionApi("snapshot")),
          this.request(this.sessionApi("status")),
        ]);
      } catch (error) {
        this.showError(error);
        return;
      }
      this.messages = snapshot.messages;
      this.pending = snapshot.pendingClientToolCalls || {};
      this.entries = [];
      this.baseSequence = this.lastSequence = snapshot.streamSequence;
      this.render();
      this.setStatus(statusOf(session));
      this.followAgain(); // From the snapshot, whatever a reconnection opened meanwhile.
      this.watchState();
    }

    // The stream

    follow() {
      if (this.socket) return;
      const path = `/ws/sessions/${encodeURIComponent(this.sessionId)}/stream`;
      const socket = new WebSocket(socketUrl(`${path}?fromSequence=${this.lastSequence}`));
      this.socket = socket;
      socket.addEventListener("message", (message) => {
        if (socket !== this.socket) return; // A socket this chat left; its events come again.
        this.streamDelay = RECONNECT_FIRST_MS;
        const frame = JSON.parse(message.data);
        this.receive(frame.type === "batch" ? frame.events : [frame]);
      });
      socket.addEventListener("close", () => {
        if (socket !== this.socket) return;
        this.socket = null; // Dropped before the stream ended: go on from the last sequence.
        setTimeout(() => this.follow(), this.streamDelay);
        this.streamDelay = Math.min(2 * this.streamDelay, RECONNECT_MAX_MS);
      });
    }

    stopFollowing() {
      const socket = this.socket;
      this.socket = null;
      socket?.close();
    }

    // A run began after the stream may have ended: read it again from the last sequence.
    followAgain() {
      this.stopFollowing();
      this.follow();
    }

    receive(events) {
      let committed = false;
      for (const event of events) {
        if (event.type === "chunk") {
          if (event.sequence <= this.lastSequence) continue;
          const entry = { sequence: event.sequence, chunk: event.chunk };
          this.entries.push(entry);
          this.lastSequence = event.sequence;
          this.apply(entry);
          committed ||= COMMITS.has(event.chunk.type);
        } else if (event.type === "resync") {
          if (event.fromSequence < this.baseSequence) {
            this.load(); // Behind the snapshot: take a new one.
            return;
          }
          this.entries = this.entries.filter((entry) => entry.sequence <= event.fromSequence);
          this.lastSequence = event.fromSequence;
          this.render();
        } else if (event.type === "end" || event.type === "fail") {
          this.stopFollowing();
          if (event.type === "fail") {
            this.setStatus("failed");
            this.showError(event.error);
          }
        }
      }
      // The embedded mode's in-process channel layer cannot bring a worker's state change to
      // this server's state socket; a new connection is sent the stored state.
      if (committed) this.watchState();
      this.scrollToEnd();
    }

    // The agent's state

    watchState() {
      const previous = this.stateSocket;
      this.stateSocket = null;
      previous?.close();
      const path = `/agents/${kebabCase(this.agentType)}/${encodeURIComponent(this.sessionId)}`;
      const socket = new WebSocket(socketUrl(path));
      this.stateSocket = socket;
      socket.addEventListener("message", (message) => {
        if (socket !== this.stateSocket) return;
        this.stateDelay = RECONNECT_FIRST_MS;
        const frame = JSON.parse(message.data);
        if (frame.type === "cf_agent_state") this.stateView.textContent = json(frame.state);
      });
      socket.addEventListener("close", () => {
        if (socket !== this.stateSocket) return;
        this.stateSocket = null;
        setTimeout(() => this.stateSocket || this.watchState(), this.stateDelay);
        this.stateDelay = Math.min(2 * this.stateDelay, RECONNECT_MAX_MS);
      });
    }

    // Actions

    async send() {
      const text = this.composer.message.value.trim();
      if (!text) return;
      const isNew = !this.sessionId;
      const id = this.sessionId || newSessionId();
      // Placed before the run's first chunk, wherever the stream stands now.
      const entry = { sequence: this.lastSequence, user: text };
      this.entries.push(entry);
      this.apply(entry);
      this.scrollToEnd();
      this.composer.message.value = "";
      this.setBusy(true);
      try {
        const url = `${this.sessionsUrl}${encodeURIComponent(id)}/start`;
        await this.request(url, { agentType: this.agentType, input: { message: text } });
      } catch (error) {
        this.entries = this.entries.filter((kept) => kept !== entry);
        this.render();
        this.composer.message.value = text;
        this.showError(error);
        return;
      } finally {
        this.setBusy(false);
      }
      this.clearError();
      this.setStatus("running");
      if (isNew) {
        this.sessionId = id;
        if (this.pageUrl) history.replaceState(null, "", `${this.pageUrl}${encodeURIComponent(id)}/`);
        this.watchState();
      }
      this.followAgain();
    }

    async control(action) {
      this.setBusy(true);
      try {
        await this.request(this.sessionApi(action), {});
      } catch (error) {
        this.showError(error);
        return;
      } finally {
        this.setBusy(false);
      }
      this.clearError();
      if (action !== "interrupt") {
        this.setStatus("running");
        this.followAgain();
      }
    }

    async answer(toolCallId, body, form) {
      for (const field of form.querySelectorAll("button, input")) field.disabled = true;
      try {
        const url = `${this.chatUrl}/${encodeURIComponent(this.sessionId)}/submit-tool-result`;
        await this.request(url, { toolCallId, ...body });
      } catch (error) {
        for (const field of form.querySelectorAll("button, input")) field.disabled = false;
        this.showError(error);
        return;
      }
      this.clearError();
      // Unless the stream told what came of the call while the request was out (the resumed
      // run may have run it already): that is newer than this.
      if (this.tools.get(toolCallId)?.dataset.asking) {
        this.settle(toolCallId, "approved" in body ? (body.approved ? "approved" : "denied") : "sent");
      }
      // A new socket reads what the resumed run writes at once, without waiting for a bell
      // (or the next poll) on a socket that has been idle through the suspension.
      this.followAgain();
    }

    // Drawing

    render() {
      this.transcript.replaceChildren();
      this.tools = new Map();
      for (const message of this.messages) this.drawMessage(message);
      for (const [id, call] of Object.entries(this.pending)) {
        if (!("submission" in call)) this.ask(id, call.kind);
      }
      for (const entry of this.entries) this.apply(entry);
    }

    drawMessage(message) {
      if (message.role === "user") {
        const text = message.parts.filter((part) => part.type === "text").map((part) => part.text);
        this.addUser(text.join("\n"));
        return;
      }
      if (message.role !== "assistant") return;
      for (const part of message.parts) {
        if (part.type === "text" || part.type === "reasoning") {
          this.newText(part.type, null).textContent = part.text;
        } else if (part.type === "dynamic-tool") {
          this.addTool(part.toolCallId, part.toolName, part.input);
          if (part.state === "output-available") this.setResult(part.toolCallId, part.output);
        }
      }
    }

    apply(entry) {
      if ("user" in entry) {
        this.addUser(entry.user);
        return;
      }
      const chunk = entry.chunk;
      switch (chunk.type) {
        case "text_delta":
        case "reasoning_delta":
          this.appendText(chunk.type === "text_delta" ? "text" : "reasoning", chunk);
          break;
        case "tool_call_start":
          this.addTool(chunk.toolCallId, chunk.toolName, chunk.input);
          break;
        case "tool_result":
          this.setResult(chunk.toolCallId, chunk.result, chunk.isError);
          break;
        case "tool_approval_request":
          this.ask(chunk.toolCallId, "approval");
          break;
        case "tool_approval_response":
          this.settle(chunk.toolCallId, chunk.decision === "approve" ? "approved" : "denied");
          break;
        case "run_suspended":
          if (chunk.reason !== "awaiting_children") {
            for (const id of chunk.pendingToolCallIds) {
              if (!this.tools.get(id)?.dataset.asking) this.ask(id, "client");
            }
          }
          break;
        case "run_completed":
          // Structured output; an agent without an output schema ends with its reply's text.
          if (chunk.output !== null && typeof chunk.output === "object") {
            this.addNote(`Output: ${json(chunk.output)}`, "output");
          }
          break;
        case "run_interrupted":
          this.addNote(chunk.reason ? `Interrupted: ${chunk.reason}` : "Interrupted", "interrupted");
          break;
        case "run_failed":
          this.addNote(`Failed: ${chunk.error}`, "failed");
          break;
        case "subagent_start":
          this.addNote(`Sub-agent ${chunk.subAgentType} started`, "subagent");
          break;
        case "subagent_end":
          this.addNote(`Sub-agent ${chunk.subAgentType} ${chunk.error ? "failed" : "finished"}`, "subagent");
          break;
        case "error":
          this.addNote(`Error: ${chunk.error}`, "failed");
          break;
      }
      if (chunk.type in RUN_STATUS) this.setStatus(RUN_STATUS[chunk.type]);
    }

    addUser(text) {
      const item = element("li", "helix-msg helix-msg--user");
      item.append(element("div", "helix-part helix-part--text", text));
      this.transcript.append(item);
    }

    addNote(text, kind) {
      this.transcript.append(element("li", `helix-note helix-note--${kind}`, text));
    }

    assistant() {
      const last = this.transcript.lastElementChild;
      if (last?.classList.contains("helix-msg--assistant")) return last;
      const item = element("li", "helix-msg helix-msg--assistant");
      this.transcript.append(item);
      return item;
    }

    newText(kind, step) {
      const part = element("div", `helix-part helix-part--${kind}`);
      if (step !== null) part.dataset.step = step;
      this.assistant().append(part);
      return part;
    }

    // A delta continues the text its step is writing, or starts the step's next one.
    appendText(kind, chunk) {
      const last = this.assistant().lastElementChild;
      const continues = last?.classList.contains(`helix-part--${kind}`)
        && last.dataset.step === String(chunk.step);
      const part = continues ? last : this.newText(kind, chunk.step);
      part.textContent += chunk.delta;
    }

    addTool(id, name, input) {
      const tool = element("div", "helix-part helix-tool");
      tool.dataset.toolCallId = id;
      const head = element("div", "helix-tool__head");
      head.append(element("span", "helix-tool__name", name), element("span", "helix-tool__state", "running"));
      tool.append(head, element("pre", "helix-tool__input", json(input ?? {})));
      this.assistant().append(tool);
      this.tools.set(id, tool);
    }

    setResult(id, result, isError = false) {
      const tool = this.tools.get(id);
      if (!tool) return;
      this.settle(id, isError ? "error" : "done");
      tool.querySelector(".helix-tool__result")?.remove();
      tool.append(element("pre", "helix-tool__result", json(result)));
      tool.classList.toggle("helix-tool--error", isError);
    }

    // Ask the person for an approval, or for a client tool's result.
    ask(id, kind) {
      const tool = this.tools.get(id);
      if (!tool) return;
      tool.querySelector(".helix-tool__ask")?.remove();
      tool.dataset.asking = kind;
      tool.querySelector(".helix-tool__state").textContent =
        kind === "approval" ? "awaiting approval" : "awaiting result";
      const form = element("form", "helix-tool__ask");
      if (kind === "approval") {
        const approve = element("button", "helix-tool__approve", "Approve");
        const deny = element("button", "helix-tool__deny", "Deny");
        approve.type = deny.type = "button";
        approve.addEventListener("click", () => this.answer(id, { approved: true }, form));
        deny.addEventListener("click", () => this.answer(id, { approved: false }, form));
        form.append(approve, deny);
      } else {
        const input = element("input");
        input.name = "result";
        input.required = true;
        input.setAttribute("aria-label", `Result of ${tool.querySelector(".helix-tool__name").textContent}`);
        const submit = element("button", null, "Send result");
        submit.type = "submit";
        form.append(input, submit);
        form.addEventListener("submit", (event) => {
          event.preventDefault();
          let result = input.value;
          try {
            result = JSON.parse(result);
          } catch {
            // Not JSON: the result is the text as typed.
          }
          this.answer(id, { result }, form);
        });
      }
      tool.append(form);
    }

    settle(id, state) {
      const tool = this.tools.get(id);
      if (!tool) return;
      delete tool.dataset.asking;
      tool.querySelector(".helix-tool__ask")?.remove();
      tool.querySelector(".helix-tool__state").textContent = state;
    }

    scrollToEnd() {
      this.transcript.scrollTop = this.transcript.scrollHeight;
    }

    setStatus(status) {
      this.status = status;
      this.statusView.textContent = status;
      this.root.dataset.status = status;
      this.updateControls();
    }

    setBusy(busy) {
      this.busy = busy;
      this.updateControls();
    }

    // What a person can do now; nothing while a request of theirs is on its way.
    updateControls() {
      const { busy, status } = this;
      this.buttons.interrupt.disabled = busy || status !== "running";
      this.buttons.resume.disabled = busy || status !== "interrupted";
      this.buttons.retry.disabled = busy || status !== "failed";
      this.composer.querySelector("button[type=submit]").disabled =
        busy || status === "running" || status === "suspended";
    }

    showError(error) {
      this.errorView.textContent = error instanceof Error ? error.message : String(error);
      this.errorView.hidden = false;
    }

    clearError() {
      this.errorView.hidden = true;
      this.errorView.textContent = "";
    }
  }

  for (const root of document.querySelectorAll("[data-helix-chat]")) {
    if (root.helixChat) continue; // The widget's script comes once per include.
    root.helixChat = new Chat(root);
  }
})();
