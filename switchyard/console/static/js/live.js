// The live snapshots (/v1/console/stream): one per second while a dashboard is open, with helpers to read a
// metric's samples and the rate of a counter between two snapshots.
import { ApiError, AuthError, streamEvents } from "./api.js";

export class LiveFeed {
  constructor(onSnapshot, onError) {
    this.onSnapshot = onSnapshot;
    this.onError = onError;
    this.controller = null;
    this.previous = null;
  }

  start() {
    if (this.controller) return;
    this.controller = new AbortController();
    const { signal } = this.controller;
    streamEvents("/v1/console/stream", {
      signal,
      onEvent: (snapshot) => {
        const view = new Snapshot(snapshot, this.previous);
        this.previous = snapshot;
        this.onSnapshot(view);
      },
    }).then(
      () => this.retry(signal),
      (error) => {
        if (signal.aborted) return;
        this.onError(error);
        const refused = error instanceof AuthError || (error instanceof ApiError && error.status === 403);
        if (!refused) this.retry(signal);
      },
    );
  }

  retry(signal) {
    // The stream ended (a restart, a proxy's timeout): reconnect while the view is still open.
    if (signal.aborted) return;
    this.controller = null;
    setTimeout(() => this.start(), 2000);
  }

  stop() {
    this.controller?.abort();
    this.controller = null;
    this.previous = null;
  }
}

export class Snapshot {
  constructor(data, previous) {
    this.data = data;
    this.previous = previous;
  }

  get time() {
    return this.data.time;
  }

  samples(name, data = this.data) {
    return data?.series?.[name] || [];
  }

  // The sum of a metric's samples whose labels match `where`.
  sum(name, where = {}, data = this.data) {
    return this.samples(name, data)
      .filter((sample) => Object.entries(where).every(([key, value]) => sample.labels[key] === value))
      .reduce((total, sample) => total + sample.value, 0);
  }

  value(name, where = {}) {
    return this.samples(name).length ? this.sum(name, where) : null;
  }

  // A counter's increase per second since the previous snapshot (null on the first).
  rate(name, where = {}) {
    if (!this.previous) return null;
    const seconds = this.data.time - this.previous.time;
    if (seconds <= 0) return null;
    return Math.max(0, this.sum(name, where) - this.sum(name, where, this.previous)) / seconds;
  }

  quantile(name, which) {
    return this.data.quantiles?.[name]?.[which] ?? null;
  }
}
