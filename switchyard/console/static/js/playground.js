// The chat playground: streams a reply with the chosen sampling settings, tools and JSON schema, and shows
// each reply's token counts, cached tokens, time to first token and tokens per second.
import { getJson, streamEvents } from "./api.js";
import { element, fixed } from "./format.js";

const $ = (id) => document.getElementById(id);

export class PlaygroundView {
  constructor(onError) {
    this.onError = onError;
    this.history = [];
    this.controller = null;
    this.loaded = false;
    $("pg-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.send();
    });
    $("pg-input").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        this.send();
      }
    });
    $("pg-stop").addEventListener("click", () => this.controller?.abort());
    $("pg-clear").addEventListener("click", () => {
      this.history = [];
      $("pg-log").replaceChildren();
    });
  }

  async open() {
    if (this.loaded) return;
    try {
      const models = await getJson("/v1/models");
      $("pg-model").replaceChildren(...models.data.map((m) => element("option", { text: m.id, attrs: { value: m.id } })));
      this.loaded = true;
    } catch (error) {
      this.onError(error);
    }
  }

  close() {}

  showError(message) {
    const box = $("pg-error");
    box.textContent = message;
    box.hidden = !message;
  }

  request() {
    const number = (id) => {
      const text = $(id).value.trim();
      return text === "" ? undefined : Number(text);
    };
    const system = $("pg-system").value.trim();
    const body = {
      model: $("pg-model").value,
      messages: [...(system ? [{ role: "system", content: system }] : []), ...this.history],
      stream: true,
      stream_options: { include_usage: true },
      temperature: number("pg-temperature"),
      top_p: number("pg-top-p"),
      max_tokens: number("pg-max-tokens"),
      seed: number("pg-seed"),
    };
    const toolsText = $("pg-tools").value.trim();
    if (toolsText) {
      let tools;
      try {
        tools = JSON.parse(toolsText);
      } catch (error) {
        throw new Error(`Tools are not valid JSON: ${error.message}`);
      }
      if (!Array.isArray(tools)) tools = [tools];
      body.tools = tools.map((tool) => (tool.type === "function" ? tool : { type: "function", function: tool }));
    }
    if ($("pg-json-on").checked) {
      let schema;
      try {
        schema = JSON.parse($("pg-schema").value || "{}");
      } catch (error) {
        throw new Error(`The JSON schema is not valid JSON: ${error.message}`);
      }
      body.response_format = { type: "json_schema", json_schema: { name: "playground", schema } };
    }
    return body;
  }

  async send() {
    const input = $("pg-input");
    const text = input.value.trim();
    if (!text || this.controller) return;
    this.showError("");
    this.history.push({ role: "user", content: text });
    let body;
    try {
      body = this.request();
    } catch (error) {
      this.history.pop();
      this.showError(error.message);
      return;
    }
    input.value = "";
    const log = $("pg-log");
    log.append(element("li", { className: "user", text }));
    const content = element("span", { className: "content" });
    const calls = element("span", { className: "calls" });
    const stats = element("span", { className: "stats", text: "waiting for the first token…" });
    const bubble = element("li", { className: "assistant", attrs: { "aria-busy": "true" } }, [content, calls, stats]);
    log.append(bubble);
    bubble.scrollIntoView({ block: "end" });

    this.controller = new AbortController();
    $("pg-send").hidden = true;
    $("pg-stop").hidden = false;
    const started = performance.now();
    let firstToken = null;
    let usage = null;
    let finish = null;
    const toolCalls = [];
    let stopped = false;
    try {
      await streamEvents("/v1/chat/completions", {
        body,
        signal: this.controller.signal,
        onEvent: (chunk) => {
          if (chunk.usage) usage = chunk.usage;
          const choice = chunk.choices?.[0];
          if (!choice) return;
          const delta = choice.delta || {};
          if ((delta.content || delta.tool_calls) && firstToken === null) firstToken = performance.now();
          if (delta.content) content.textContent += delta.content;
          for (const call of delta.tool_calls || []) {
            const slot = (toolCalls[call.index ?? 0] ||= { name: "", arguments: "" });
            slot.name += call.function?.name || "";
            slot.arguments += call.function?.arguments || "";
          }
          if (toolCalls.length) {
            calls.replaceChildren(...toolCalls.map((c) => element("span", { className: "tool-call", text: `→ ${c.name}(${c.arguments})` })));
          }
          if (choice.finish_reason) finish = choice.finish_reason;
          bubble.scrollIntoView({ block: "end" });
        },
      });
    } catch (error) {
      if (this.controller.signal.aborted) stopped = true;
      else {
        this.showError(error.message);
        this.onError(error, { quiet: true });
      }
    }
    const ended = performance.now();
    this.controller = null;
    $("pg-send").hidden = false;
    $("pg-stop").hidden = true;
    bubble.removeAttribute("aria-busy");
    this.history.push({ role: "assistant", content: content.textContent });
    stats.textContent = describe({ usage, started, firstToken, ended, finish, stopped });
    input.focus();
  }
}

function describe({ usage, started, firstToken, ended, finish, stopped }) {
  const parts = [];
  if (stopped) parts.push("stopped");
  else if (finish) parts.push(`finish: ${finish}`);
  if (usage) {
    parts.push(`prompt ${usage.prompt_tokens} tok`);
    parts.push(`cached ${usage.prompt_tokens_details?.cached_tokens ?? 0}`);
    parts.push(`completion ${usage.completion_tokens} tok`);
  }
  if (firstToken !== null) {
    parts.push(`TTFT ${fixed(firstToken - started, 0)} ms`);
    const seconds = (ended - firstToken) / 1000;
    if (usage && usage.completion_tokens > 1 && seconds > 0) {
      parts.push(`${fixed((usage.completion_tokens - 1) / seconds)} tok/s`);
    }
  }
  return parts.join(" · ");
}
