// Rolling line charts of the last two minutes (uPlot, vendored; loaded as a classic script: window.uPlot).

const POINTS = 120;
const COLOURS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea"];

export class RollingChart {
  constructor(container, seriesNames) {
    this.container = container;
    this.names = seriesNames;
    this.columns = [[], ...seriesNames.map(() => [])];
    this.plot = null;
  }

  push(time, values) {
    this.columns[0].push(time);
    values.forEach((value, index) => this.columns[index + 1].push(value ?? null));
    if (this.columns[0].length > POINTS) for (const column of this.columns) column.shift();
    this.draw();
  }

  draw() {
    const width = Math.max(200, this.container.clientWidth);
    if (!this.plot) {
      if (!this.container.isConnected || this.container.clientWidth === 0) return;
      this.plot = new window.uPlot(
        {
          width,
          height: 180,
          legend: { show: this.names.length > 1, live: false },
          series: [{}, ...this.names.map((label, i) => ({ label, stroke: COLOURS[i % COLOURS.length], width: 2, spanGaps: true }))],
          axes: [{ stroke: "#888" }, { stroke: "#888", size: 50 }],
          scales: { y: { range: (_, min, max) => [0, Math.max(max || 0, 1e-9) * 1.1] } },
          cursor: { show: false },
        },
        this.columns,
        this.container,
      );
      return;
    }
    if (Math.abs(this.plot.width - width) > 4) this.plot.setSize({ width, height: 180 });
    this.plot.setData(this.columns);
  }

  reset() {
    this.plot?.destroy();
    this.plot = null;
    this.columns = [[], ...this.names.map(() => [])];
  }
}
