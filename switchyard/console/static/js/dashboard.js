// The engine's live dashboard: KV usage, queues, throughput, latency quantiles, caching and speculation.
import { RollingChart } from "./charts.js";
import { count, fixed, millis, percent } from "./format.js";
import { LiveFeed } from "./live.js";

const M = "switchyard:";
const $ = (id) => document.getElementById(id);

export class DashboardView {
  constructor(onError) {
    this.feed = new LiveFeed((snapshot) => this.show(snapshot), onError);
    this.charts = {
      kv: new RollingChart($("db-chart-kv"), ["KV %"]),
      queue: new RollingChart($("db-chart-queue"), ["running", "waiting"]),
      tput: new RollingChart($("db-chart-tput"), ["tok/s"]),
      ttft: new RollingChart($("db-chart-ttft"), ["p50", "p99"]),
    };
  }

  open() {
    this.feed.start();
  }

  close() {
    this.feed.stop();
  }

  show(s) {
    const kv = s.value(`${M}kv_cache_usage_perc`);
    const meter = $("db-kv");
    meter.value = kv ?? 0;
    meter.dataset.value = kv ?? "";
    $("db-kv-text").textContent = percent(kv);
    const running = s.value(`${M}num_requests_running`);
    const waiting = s.value(`${M}num_requests_waiting`);
    $("db-running").textContent = count(running);
    $("db-waiting").textContent = count(waiting);
    $("db-preempted").textContent = count(s.value(`${M}num_preemptions`));
    const generated = s.rate(`${M}generation_tokens`);
    $("db-gen-rate").textContent = fixed(generated);
    $("db-prompt-rate").textContent = fixed(s.rate(`${M}prompt_tokens`));
    const ttft50 = s.quantile(`${M}time_to_first_token_seconds`, "p50");
    const ttft99 = s.quantile(`${M}time_to_first_token_seconds`, "p99");
    $("db-ttft-p50").textContent = millis(ttft50);
    $("db-ttft-p99").textContent = millis(ttft99);
    $("db-itl-p50").textContent = millis(s.quantile(`${M}inter_token_latency_seconds`, "p50"));
    $("db-itl-p99").textContent = millis(s.quantile(`${M}inter_token_latency_seconds`, "p99"));
    $("db-prefix-hit").textContent = percent(s.value(`${M}prefix_cache_hit_rate`));
    const proposed = s.value(`${M}spec_decode_tokens`, { kind: "proposed" });
    $("db-spec").textContent = proposed ? percent(s.value(`${M}spec_decode_acceptance_rate`)) : "off";
    for (const node of document.querySelectorAll("#view-dashboard .window")) node.textContent = s.data.window_s;
    const t = s.time;
    this.charts.kv.push(t, [kv === null ? null : kv * 100]);
    this.charts.queue.push(t, [running, waiting]);
    this.charts.tput.push(t, [generated]);
    this.charts.ttft.push(t, [ttft50 === null ? null : ttft50 * 1000, ttft99 === null ? null : ttft99 * 1000]);
  }
}
