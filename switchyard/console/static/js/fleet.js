// The gateway's live dashboard: requests and latency, replicas with health and load, routing decisions,
// per-tenant usage and cost, and online evaluation per pool.
import { count, fillTable, fixed, millis, money, percent } from "./format.js";
import { LiveFeed } from "./live.js";

const M = "switchyard:fleet_";
const $ = (id) => document.getElementById(id);

function grouped(samples, keys) {
  const groups = new Map();
  for (const sample of samples) {
    const id = keys.map((key) => sample.labels[key] ?? "").join("\u0000");
    const group = groups.get(id) || { labels: sample.labels, value: 0 };
    group.value += sample.value;
    groups.set(id, group);
  }
  return [...groups.values()];
}

export class FleetView {
  constructor(onError) {
    this.feed = new LiveFeed((snapshot) => this.show(snapshot), onError);
  }

  open() {
    this.feed.start();
  }

  close() {
    this.feed.stop();
  }

  show(s) {
    $("fl-rate").textContent = fixed(s.rate(`${M}requests`));
    $("fl-queue").textContent = count(s.value(`${M}queue_depth`));
    $("fl-in-flight").textContent = count(s.value(`${M}in_flight`));
    $("fl-ttfb-p50").textContent = millis(s.quantile(`${M}time_to_first_byte_seconds`, "p50"));
    $("fl-ttfb-p99").textContent = millis(s.quantile(`${M}time_to_first_byte_seconds`, "p99"));
    $("fl-lat-p50").textContent = millis(s.quantile(`${M}request_latency_seconds`, "p50"));
    $("fl-lat-p99").textContent = millis(s.quantile(`${M}request_latency_seconds`, "p99"));

    const replicas = s.data.extra?.replicas || [];
    fillTable($("fl-replicas"), replicas.map((r) => [
      r.name, r.pool, { text: r.health, className: `health-${r.health}` }, count(r.in_flight),
      count(r.load.num_running), count(r.load.num_waiting), percent(r.load.kv_cache_usage), count(r.ejections),
    ]), "No replicas.");

    const routing = s.samples(`${M}requests`).filter((sample) => sample.value > 0);
    fillTable($("fl-routing"), routing.map((r) => [
      r.labels.pool, r.labels.replica, r.labels.decision, r.labels.status, count(r.value),
    ]), "No requests answered yet.");

    const credits = s.data.extra?.credits || {};
    const tenants = grouped(s.samples(`${M}tenant_requests`), ["tenant", "model"]);
    const rows = tenants.map(({ labels, value }) => {
      const where = { tenant: labels.tenant, model: labels.model };
      return [
        labels.tenant, labels.model, count(value),
        count(s.sum(`${M}tenant_tokens`, { ...where, kind: "prompt" })),
        count(s.sum(`${M}tenant_tokens`, { ...where, kind: "cached" })),
        count(s.sum(`${M}tenant_tokens`, { ...where, kind: "output" })),
        money(s.sum(`${M}tenant_cost`, where)),
        labels.tenant in credits ? money(credits[labels.tenant]) : "–",
      ];
    });
    const seen = new Set(tenants.map(({ labels }) => labels.tenant));
    for (const [tenant, balance] of Object.entries(credits)) {
      if (!seen.has(tenant)) rows.push([tenant, "–", "0", "0", "0", "0", "–", money(balance)]);
    }
    fillTable($("fl-tenants"), rows, "No tenant traffic (tenants need the gateway's --tenants-db).");

    const logged = grouped(s.samples(`${M}online_eval_logged`), ["pool", "shadow"]);
    fillTable($("fl-eval"), logged.map(({ labels, value }) => {
      const where = { pool: labels.pool, shadow: labels.shadow };
      const judged = s.sum(`${M}online_eval_judged`, where);
      const passed = s.sum(`${M}online_eval_judge_passed`, where);
      const ratings = labels.shadow === "false" ? s.sum(`${M}online_eval_ratings`, { pool: labels.pool }) : 0;
      const ratingSum = labels.shadow === "false" ? s.sum(`${M}online_eval_rating_sum`, { pool: labels.pool }) : 0;
      const latencySum = s.sum(`${M}online_eval_latency_seconds_sum`, where);
      const latencyCount = s.sum(`${M}online_eval_latency_seconds_count`, where);
      return [
        labels.pool, labels.shadow, count(value), count(judged), judged ? percent(passed / judged) : "–",
        count(ratings), ratings ? fixed(ratingSum / ratings, 2) : "–",
        latencyCount ? `${fixed(latencySum / latencyCount, 2)} s` : "–",
        money(s.sum(`${M}online_eval_cost`, where)),
      ];
    }), "Nothing logged (online evaluation needs the gateway's --eval-sample).");
  }
}
