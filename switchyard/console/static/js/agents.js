// Agent runs from the checkpoint store: a list, one run's timeline (model turns, tool calls and results,
// handoffs, approvals, tokens and cost), and Approve / Reject for calls waiting on a human.
import { getJson, postJson } from "./api.js";
import { count, element, fillTable, money } from "./format.js";

const $ = (id) => document.getElementById(id);

export class AgentsView {
  constructor(onError) {
    this.onError = onError;
    this.timer = null;
    this.selected = null;
    this.shownApprovals = "";
  }

  open() {
    this.refresh();
    this.timer = setInterval(() => this.refresh(), 1000);
  }

  close() {
    clearInterval(this.timer);
    this.timer = null;
  }

  async refresh() {
    try {
      const runs = await getJson("/v1/agent/runs");
      this.showRuns(runs.data);
      if (this.selected) this.showRun(await getJson(`/v1/agent/runs/${encodeURIComponent(this.selected)}`));
    } catch (error) {
      this.onError(error);
    }
  }

  showRuns(runs) {
    const table = $("ag-runs");
    fillTable(table, runs.map((run) => [
      run.run_id.slice(0, 12), run.current_agent, { text: run.status, className: `status-${run.status}` },
      count(run.turns), count(run.usage.input_tokens + run.usage.output_tokens), money(run.cost),
      new Date(run.updated * 1000).toLocaleTimeString(),
    ]), "No runs in the checkpoint store yet.");
    if (!runs.length) return;
    [...table.tBodies[0].rows].forEach((row, index) => {
      const runId = runs[index].run_id;
      row.className = "clickable";
      row.tabIndex = 0;
      row.dataset.runId = runId;
      row.setAttribute("aria-label", `Open run ${runId}`);
      const open = () => this.select(runId);
      row.addEventListener("click", open);
      row.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          open();
        }
      });
    });
  }

  async select(runId) {
    this.selected = runId;
    this.shownApprovals = "";
    try {
      this.showRun(await getJson(`/v1/agent/runs/${encodeURIComponent(runId)}`));
    } catch (error) {
      this.onError(error);
    }
  }

  showRun({ run, steps, approvals }) {
    $("ag-detail").hidden = false;
    $("ag-title").textContent = `Run ${run.run_id}`;
    const summary = $("ag-summary");
    summary.replaceChildren(
      element("span", { className: `status-${run.status}`, text: run.status, attrs: { id: "ag-status" } }),
      ` ${run.status_detail ? `(${run.status_detail}) ` : ""}· agent ${run.current_agent} · ${run.turns} turns · `
        + `${count(run.usage.input_tokens)} in + ${count(run.usage.output_tokens)} out tokens · cost ${money(run.cost)}`,
    );
    const key = JSON.stringify(approvals);
    if (key !== this.shownApprovals) {  // keep focus on the buttons while nothing changes
      this.shownApprovals = key;
      $("ag-approvals").replaceChildren(...approvals.map((item) => this.approvalCard(run.run_id, item)));
    }
    $("ag-timeline").replaceChildren(...steps.map(timelineItem));
  }

  approvalCard(runId, item) {
    const approve = element("button", { text: "Approve", attrs: { type: "button" } });
    const reject = element("button", { className: "reject", text: "Reject", attrs: { type: "button" } });
    const card = element("div", { className: "approval", attrs: { role: "group", "aria-label": `Approval for ${item.tool}` } }, [
      element("strong", { text: `${item.agent} wants to call ${item.tool}` }),
      element("p", { text: item.reason }),
      element("pre", { text: JSON.stringify(item.arguments, null, 2) }),
      element("div", { className: "actions" }, [approve, reject]),
    ]);
    const decide = async (approved) => {
      approve.disabled = reject.disabled = true;
      try {
        await postJson(`/v1/agent/runs/${encodeURIComponent(runId)}/decisions`, { call_id: item.call_id, approve: approved });
        await this.refresh();
      } catch (error) {
        approve.disabled = reject.disabled = false;
        this.onError(error);
      }
    };
    approve.addEventListener("click", () => decide(true));
    reject.addEventListener("click", () => decide(false));
    return card;
  }
}

function timelineItem(step) {
  const payload = step.payload;
  let kind = step.kind;
  let text = typeof payload === "string" ? payload : JSON.stringify(payload);
  if (step.kind === "input") {
    kind = "user input";
  } else if (step.kind === "model_output") {
    kind = "model turn";
    const calls = (payload.tool_calls || []).map((c) => `→ ${c.function.name}(${c.function.arguments})`);
    text = [payload.content || "", ...calls].filter(Boolean).join("\n");
  } else if (step.kind === "tool_result") {
    kind = `tool result: ${payload.tool}`;
    text = payload.result;
  } else if (step.kind === "context") {
    kind = payload.handoff ? "handoff" : "context";
    text = `${payload.handoff ? `to agent ${payload.agent}` : `agent ${payload.agent}`}`
      + `${payload.tainted ? " · untrusted content in context" : ""}`;
  } else if (step.kind === "approval") {
    kind = payload.approved ? "approved" : "rejected";
    text = `${payload.tool} (${payload.call_id})${payload.reason ? ` — ${payload.reason}` : ""}`;
  } else if (step.kind === "finish") {
    kind = `finished: ${payload.status}`;
    text = payload.detail || "";
  }
  return element("li", { attrs: { "data-kind": step.kind } }, [element("span", { className: "kind", text: `${step.step} · ${kind}` }), text]);
}
