// Live training charts drawn by uPlot (pinned npm package, served at /lib/uplot/): loss and
// accuracy against epochs, the training curve per step and the held-out one per epoch.

const COLORS = { train: "#2563eb", heldOut: "#d97706" };

function chartOptions(title, yLabel, width) {
  return {
    title,
    width,
    height: 180,
    scales: { x: { time: false } },
    axes: [{ label: "epoch" }, { label: yLabel }],
    series: [
      { label: "epoch" },
      { label: "train", stroke: COLORS.train, width: 2, spanGaps: true, points: { show: false } },
      { label: "held-out", stroke: COLORS.heldOut, width: 2, spanGaps: true, points: { size: 6 } },
    ],
  };
}

export class TrainingCharts {
  constructor(lossElement, accuracyElement) {
    this.elements = [lossElement, accuracyElement];
    this.charts = null;
    this.data = null;
  }

  async mount() {
    const { default: uPlot } = await import("/lib/uplot/uPlot.esm.js");
    const width = (element) => Math.max(240, element.clientWidth);
    const [loss, accuracy] = this.elements;
    this.charts = [
      new uPlot(chartOptions("Loss", "loss", width(loss)), [[], [], []], loss),
      new uPlot(chartOptions("Accuracy", "accuracy", width(accuracy)), [[], [], []], accuracy),
    ];
    new ResizeObserver(() => {
      this.charts.forEach((chart, i) => chart.setSize({ width: width(this.elements[i]), height: 180 }));
    }).observe(loss.parentElement.parentElement);
    this.reset();
  }

  reset() {
    this.data = { x: [], loss: [[], []], accuracy: [[], []] };
    this.draw();
  }

  // x in epochs; held-out values only where an epoch ended (null elsewhere).
  add(x, { loss, accuracy, heldOutLoss = null, heldOutAccuracy = null }) {
    this.data.x.push(x);
    this.data.loss[0].push(loss);
    this.data.loss[1].push(heldOutLoss);
    this.data.accuracy[0].push(accuracy);
    this.data.accuracy[1].push(heldOutAccuracy);
    this.draw();
  }

  draw() {
    if (!this.charts) return;
    this.charts[0].setData([this.data.x, ...this.data.loss]);
    this.charts[1].setData([this.data.x, ...this.data.accuracy]);
  }
}
