// The evals page: the run list, one run, two runs compared. Every number comes from
// the run API (live) or from the `scorer eval --format json` document embedded in the
// file (offline); this script only lays them out. Plain DOM and inline SVG: no library,
// nothing fetched but the API.
"use strict";

(() => {
  const API = "/api/v1/evals/runs";
  const POLL_MS = 3000;
  // [wire name, label] of every measure and of the run list's headline ones, written in
  // from the registry (scorer.core.measures) when the page is assembled.
  const { METRICS, HEADLINE } = /*EVALS-MEASURES*/;
  const LOSSES = [
    ["miss", "miss (1 − hit@k)", "solid line, circles"],
    ["ndcgLoss", "nDCG loss (1 − nDCG@10)", "dashed line, squares"],
  ];
  const SVG_NS = "http://www.w3.org/2000/svg";

  // ---- DOM ---------------------------------------------------------------------------
  function build(element, attrs, children) {
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
      else element.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      element.append(child instanceof Node ? child : String(child));
    }
    return element;
  }
  const h = (tag, attrs, ...children) => build(document.createElement(tag), attrs, children);
  const svg = (tag, attrs, ...children) =>
    build(document.createElementNS(SVG_NS, tag), attrs, children);

  const missing = (value) => value === null || value === undefined;
  const fixed = (value) => (missing(value) ? "–" : Number(value).toFixed(4));
  const signed = (value) => (missing(value) ? "–" : (value > 0 ? "+" : "") + fixed(value));
  const interval = (ci) => (ci ? `[${fixed(ci[0])}, ${fixed(ci[1])}]` : "–");
  const when = (iso) => (iso ? iso.replace("T", " ").replace(/\.\d+/, "").replace("+00:00", " UTC") : "–");

  /** A right-aligned cell; `data-value` keeps the exact number for tests and sorting. */
  function numberCell(value, text) {
    return h("td", { class: "number", "data-value": missing(value) ? null : value },
      text === undefined ? fixed(value) : text);
  }

  // ---- Sources: the live run API, or the embedded offline document ----------------------
  async function getJSON(path) {
    const response = await fetch(path, { headers: { Accept: "application/json" } });
    let body;
    try {
      body = await response.json();
    } catch {
      body = {};
    }
    if (!response.ok) throw new Error(body.error || `${path} answered ${response.status}`);
    return body;
  }

  const pathOf = (runId) => `${API}/${encodeURIComponent(runId)}`;
  const excludesZero = (ci) => Boolean(ci) && (ci[0] > 0 || ci[1] < 0);

  function liveSource() {
    return {
      live: true,
      description: `live from this worker's run API (${API})`,
      async runs() {
        const runs = [];
        for (let offset = 0; offset !== null && offset !== undefined; ) {
          const page = await getJSON(`${API}?limit=500&offset=${offset}`);
          runs.push(...page.runs);
          offset = page.nextOffset;
        }
        return runs;
      },
      metrics: (runId) => getJSON(`${pathOf(runId)}/metrics`),
      risk: (runId) => getJSON(`${pathOf(runId)}/risk-coverage`),
      async compare(runA, runB) {
        const body = await getJSON(`${pathOf(runA)}/compare/${encodeURIComponent(runB)}`);
        const percent = Math.round((1 - body.alpha) * 100);
        return {
          runA, runB, countA: body.countA, countB: body.countB,
          queries: body.paired.queries,
          live: true,
          note: "Δ is B − A over all results; the paired columns are over the queries both " +
            `runs answered. Significant: the anytime-valid ${percent}% interval of the paired ` +
            "difference (else, without paired queries, of Δ) excludes 0. It stays valid " +
            "however often this page re-reads it while results arrive; the fixed-horizon " +
            "intervals are shown for reference and are valid only for a single look.",
          trajectory: body.paired.trajectory,
          facets: body.facets,
          rows: METRICS.map(([key, label]) => {
            const all = body.metrics[key];
            const paired = body.paired.metrics[key];
            const decisive = body.paired.queries > 0 ? paired.anytime95 : all.anytime95;
            return {
              key, label, a: all.a, b: all.b, delta: all.delta, ci95: all.ci95,
              anytime95: all.anytime95,
              pairedDelta: paired.delta, pairedCi95: paired.ci95, pairedAnytime95: paired.anytime95,
              wins: paired.wins, losses: paired.losses, ties: paired.ties,
              significant: excludesZero(decisive),
              direction: decisive && decisive[0] > 0 ? 1 : -1,
            };
          }),
        };
      },
    };
  }

  function offlineSource(document_) {
    let evaluation = document_;
    let cutoff = `k = ${document_.k}`;
    if (document_.cutoffs) {
      const k = document_.k[0];
      evaluation = document_.cutoffs[String(k)];
      cutoff = `k = ${k} (the report also holds k = ${document_.k.slice(1).join(", ")})`;
    }
    const run = (runId) => {
      const found = evaluation.runs[runId];
      if (!found) throw new Error(`unknown run '${runId}' in this report`);
      return found;
    };
    const comparisons = evaluation.comparisons;
    return {
      live: false,
      description: `offline report of scorer eval, ${cutoff}`,
      async runs() {
        return Object.entries(evaluation.runs).map(([runId, summary]) => (
          { runId, count: summary.count, updatedAt: null }));
      },
      async metrics(runId) {
        return { runId, ...run(runId) };
      },
      async risk(runId) {
        return { runId, ...run(runId).riskCoverage };
      },
      async compare(runA, runB) {
        const found = comparisons && comparisons.runs.find(
          (entry) => entry.runA === runA && entry.runB === runB);
        if (!found) {
          throw new Error(comparisons
            ? `this report compares each run with the baseline '${comparisons.baseline}': ` +
              "pick it as run A"
            : "this report holds one run: nothing to compare");
        }
        return {
          runA, runB, countA: run(runA).count, countB: run(runB).count,
          queries: found.queries,
          note: `A and B are over the ${found.queries} queries both runs answered; ` +
            "an offline report holds the paired difference only (Student's t interval). " +
            `Significant: Holm-corrected p < ${comparisons.alpha} in the paired t-test (*) ` +
            "or the randomization test (†).",
          rows: METRICS.map(([key, label]) => {
            const m = found.metrics[key];
            const marks = (m.tTest.significant ? "*" : "") + (m.randomization.significant ? "†" : "");
            return {
              key, label, a: m.a, b: m.b, delta: null, ci95: null,
              pairedDelta: m.delta, pairedCi95: m.ci95,
              wins: m.wins, losses: m.losses, ties: m.ties,
              significant: marks !== "", marks, direction: m.delta > 0 ? 1 : -1,
            };
          }),
        };
      },
    };
  }

  // ---- Sortable tables ---------------------------------------------------------------
  const sorting = {};

  /**
   * A table whose headers are buttons that sort it (aria-sort says how).
   * columns: [{key, label, number, value(row), cell(row)}]
   */
  function sortableTable(id, caption, columns, rows, initial) {
    const order = sorting[id] || initial;
    const column = columns.find((c) => c.key === order.key) || columns[0];
    // Equal values keep one order between refreshes: by the first column, ascending.
    const tie = columns[0];
    const sorted = [...rows].sort((x, y) => {
      const a = column.value(x);
      const b = column.value(y);
      const cmp = typeof a === "string" ? a.localeCompare(b) : (a ?? -Infinity) - (b ?? -Infinity);
      if (cmp !== 0) return order.dir === "asc" ? cmp : -cmp;
      return String(tie.value(x)).localeCompare(String(tie.value(y)));
    });
    const header = columns.map((c) => {
      const active = c.key === column.key;
      const next = active && order.dir === "desc" ? "asc" : active ? "desc" : c.number ? "desc" : "asc";
      return h("th", {
        class: c.number ? "number" : null,
        scope: "col",
        "aria-sort": active ? (order.dir === "asc" ? "ascending" : "descending") : "none",
      }, h("button", {
        type: "button",
        id: `${id}-sort-${c.key}`,
        "aria-label": `sort by ${c.label}`,
        onclick: () => { sorting[id] = { key: c.key, dir: next }; render(); },
      }, c.label, " ", h("span", { class: "arrow", "aria-hidden": "true" },
        active ? (order.dir === "asc" ? "▲" : "▼") : "↕")));
    });
    return h("table", { id },
      h("caption", { class: "note" }, caption),
      h("thead", {}, h("tr", {}, header)),
      h("tbody", {}, sorted.map((row) => h("tr", {}, columns.map((c) => c.cell(row))))));
  }

  // ---- Charts ------------------------------------------------------------------------
  /** A run's nDCG@10 per time bucket, oldest to newest, on a fixed 0..1 scale. */
  function sparkline(runId, trend) {
    const width = 96;
    const height = 22;
    const title = trend.length
      ? `nDCG@10 of ${runId} per ${trend.length > 1 ? "time bucket" : "bucket"}: ` +
        trend.map((p) => fixed(p[1])).join(", ")
      : `no trend kept for ${runId} yet`;
    const x = (i) => (trend.length > 1 ? 2 + (i / (trend.length - 1)) * (width - 4) : width / 2);
    const y = (v) => height - 2 - v * (height - 4);
    return svg("svg", {
      class: "sparkline", viewBox: `0 0 ${width} ${height}`, width, height, role: "img",
      "data-points": trend.length, "aria-label": title,
    },
    svg("title", {}, title),
    trend.length > 1
      ? svg("polyline", { points: trend.map((p, i) => `${x(i).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ") })
      : null,
    trend.length ? svg("circle", { cx: x(trend.length - 1), cy: y(trend[trend.length - 1][1]), r: 2 }) : null);
  }

  /** Per facet value: a bar for the mean of `metric` and a whisker for its interval. */
  function facetChart(facet, entries, metric) {
    const [key, label] = metric;
    const rowHeight = 20;
    const left = 130;
    const width = 420;
    const plot = width - left - 60;
    const height = entries.length * rowHeight + 30;
    const x = (value) => left + value * plot;
    const title = `${label} per value of ${facet}, with 95% intervals`;
    const titleId = `chart-${facet}-title`.replace(/[^\w-]/g, "_");
    return svg("svg", {
      viewBox: `0 0 ${width} ${height}`, width, height, role: "img",
      "aria-labelledby": titleId, class: "facet-chart",
    },
    svg("title", { id: titleId }, title),
    [0, 0.5, 1].map((tick) => [
      svg("line", { class: "grid", x1: x(tick), x2: x(tick), y1: 0, y2: height - 20 }),
      svg("text", { x: x(tick), y: height - 6, "text-anchor": "middle" }, tick.toFixed(1)),
    ]),
    entries.map(([value, aggregate], i) => {
      const mean = aggregate.metrics[key];
      const ci = aggregate.ci95 && aggregate.ci95[key];
      const y = i * rowHeight + 4;
      return [
        svg("text", { x: left - 6, y: y + 12, "text-anchor": "end" },
          value.length > 18 ? `${value.slice(0, 17)}…` : value),
        svg("rect", { class: "bar", x: left, y, height: rowHeight - 8, width: Math.max(0, mean * plot) }),
        ci ? svg("line", { class: "whisker", x1: x(ci[0]), x2: x(ci[1]), y1: y + 6, y2: y + 6 }) : null,
        svg("text", { x: x(1) + 4, y: y + 12 }, fixed(mean)),
      ];
    }));
  }

  /** The risk–coverage curves of both losses, with axes, grid and a text legend. */
  function riskChart(risk) {
    const width = 520;
    const height = 340;
    const margin = { left: 56, right: 16, top: 16, bottom: 84 };
    const plotWidth = width - margin.left - margin.right;
    const plotHeight = height - margin.top - margin.bottom;
    const highest = Math.max(0, ...LOSSES.flatMap(([loss]) => risk[loss].curve.map((p) => p[1])));
    const top = highest > 0 ? Math.min(1, Math.ceil(highest * 10) / 10) : 1;
    const x = (coverage) => margin.left + coverage * plotWidth;
    const y = (value) => margin.top + plotHeight - (value / top) * plotHeight;
    const ticks = [0, 0.25, 0.5, 0.75, 1];
    const marker = (loss, px, py) => loss === "miss"
      ? svg("circle", { class: `mark ${loss}`, cx: px, cy: py, r: 2.5 })
      : svg("rect", { class: `mark ${loss}`, x: px - 2.5, y: py - 2.5, width: 5, height: 5 });
    const step = (curve) => Math.max(1, Math.ceil(curve.length / 20));
    return svg("svg", {
      id: "risk-chart", viewBox: `0 0 ${width} ${height}`, width, height, role: "img",
      "aria-labelledby": "risk-chart-title",
    },
    svg("title", { id: "risk-chart-title" },
      "Risk–coverage: selective risk against coverage, rankings ordered by confidence"),
    ticks.map((tick) => [
      svg("line", { class: "grid", x1: x(tick), x2: x(tick), y1: margin.top, y2: margin.top + plotHeight }),
      svg("text", { x: x(tick), y: margin.top + plotHeight + 16, "text-anchor": "middle" }, tick.toFixed(2)),
      svg("line", { class: "grid", x1: margin.left, x2: margin.left + plotWidth, y1: y(tick * top), y2: y(tick * top) }),
      svg("text", { x: margin.left - 6, y: y(tick * top) + 4, "text-anchor": "end" }, (tick * top).toFixed(2)),
    ]),
    svg("line", { class: "axis", x1: margin.left, x2: margin.left, y1: margin.top, y2: margin.top + plotHeight }),
    svg("line", { class: "axis", x1: margin.left, x2: margin.left + plotWidth, y1: margin.top + plotHeight, y2: margin.top + plotHeight }),
    svg("text", { x: margin.left + plotWidth / 2, y: margin.top + plotHeight + 34, "text-anchor": "middle" }, "coverage"),
    svg("text", { x: 14, y: margin.top + plotHeight / 2, transform: `rotate(-90 14 ${margin.top + plotHeight / 2})`, "text-anchor": "middle" }, "selective risk"),
    LOSSES.map(([loss, label, look], i) => {
      const curve = risk[loss].curve;
      const d = curve.map(([c, r], j) => `${j ? "L" : "M"}${x(c).toFixed(1)},${y(r).toFixed(1)}`).join(" ");
      const legendY = margin.top + plotHeight + 54 + i * 18;
      const legendX = margin.left;
      return svg("g", { class: `loss ${loss}` },
        curve.length ? svg("path", { class: `curve ${loss}`, d, "data-points": curve.length }) : null,
        curve.filter((_, j) => j % step(curve) === 0).map(([c, r]) => marker(loss, x(c), y(r))),
        svg("line", { class: `curve ${loss}`, x1: legendX, x2: legendX + 28, y1: legendY - 4, y2: legendY - 4 }),
        marker(loss, legendX + 14, legendY - 4),
        svg("text", { x: legendX + 34, y: legendY }, `${label} (${look})`));
    }));
  }

  // ---- Views -------------------------------------------------------------------------
  const state = { source: null, route: null, data: null, fingerprint: null, pickA: "", pickB: "" };

  function routeOf(hash) {
    const parts = hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
    if (parts[0] === "run" && parts[1]) return { view: "run", runId: parts[1] };
    if (parts[0] === "compare" && parts[1] && parts[2]) return { view: "compare", runA: parts[1], runB: parts[2] };
    return { view: "list" };
  }
  const runLink = (runId) => `#/run/${encodeURIComponent(runId)}`;
  const compareLink = (a, b) => `#/compare/${encodeURIComponent(a)}/${encodeURIComponent(b)}`;

  async function load(route) {
    const source = state.source;
    if (route.view === "run") {
      const [metrics, risk] = await Promise.all([source.metrics(route.runId), source.risk(route.runId)]);
      return { metrics, risk };
    }
    if (route.view === "compare") return { comparison: await source.compare(route.runA, route.runB) };
    return { runs: await source.runs() };
  }

  function listView({ runs }) {
    const ids = runs.map((r) => r.runId);
    const pick = (name, label, chosen) => h("label", {}, label,
      h("select", {
        id: `pick-${name}`, name,
        onchange: (event) => { state[name === "a" ? "pickA" : "pickB"] = event.target.value; },
      }, h("option", { value: "" }, "choose a run"),
      ids.map((id) => h("option", { value: id, selected: id === chosen }, id))));
    const form = h("form", {
      class: "compare", "aria-label": "compare two runs",
      onsubmit: (event) => {
        event.preventDefault();
        const a = state.pickA;
        const b = state.pickB;
        if (!a || !b || a === b) {
          showProblem("Pick two different runs to compare.");
          return;
        }
        location.hash = compareLink(a, b);
      },
    }, pick("a", "Run A (baseline)", state.pickA), pick("b", "Run B (candidate)", state.pickB),
    h("button", { type: "submit", id: "compare-button" }, "Compare"));
    const live = state.source.live;
    return [
      h("h2", {}, `Runs (${runs.length})`),
      runs.length === 0 ? h("p", { class: "note" }, "No run has been scored yet.") : sortableTable(
        "runs", live ? "Every run the cluster knows, newest first." : "The runs of this report.",
        [
          { key: "runId", label: "run", value: (r) => r.runId,
            cell: (r) => h("td", { "data-run": r.runId }, h("a", { href: runLink(r.runId) }, r.runId)) },
          { key: "count", label: "results", number: true, value: (r) => r.count,
            cell: (r) => numberCell(r.count, String(r.count)) },
          ...HEADLINE.filter(([key]) => runs.some((r) => r.metrics && key in r.metrics)).map(([key, label]) => ({
            key, label, number: true, value: (r) => r.metrics && r.metrics[key],
            cell: (r) => h("td", { class: "number headline", "data-metric": key,
              "data-value": r.metrics ? r.metrics[key] : null },
              fixed(r.metrics && r.metrics[key]), " ",
              h("span", { class: "interval" }, interval(r.ci95 && r.ci95[key]))),
          })),
          live && runs.some((r) => r.trend) ? { key: "trend", label: "nDCG@10 trend", value: (r) =>
            (r.trend && r.trend.length ? r.trend[r.trend.length - 1][1] : null),
          cell: (r) => h("td", {}, sparkline(r.runId, r.trend || [])) } : null,
          runs.some((r) => r.warnings) ? { key: "warnings", label: "warnings", number: true,
            value: (r) => (r.warnings || []).length,
            cell: (r) => h("td", { class: "warnings", "data-warnings": (r.warnings || []).length },
              (r.warnings || []).map((text) => h("span", { class: "warning", title: text }, "⚠ " + text))) } : null,
          live ? { key: "updatedAt", label: "last update", value: (r) => r.updatedAt || "",
            cell: (r) => h("td", { "data-value": r.updatedAt }, when(r.updatedAt)) } : null,
        ].filter(Boolean),
        runs, live ? { key: "updatedAt", dir: "desc" } : { key: "runId", dir: "asc" }),
      h("h2", {}, "Compare two runs"),
      form,
    ];
  }

  function runView({ metrics, risk }) {
    const facets = Object.entries(metrics.facets || {});
    return [
      h("p", {}, h("a", { href: "#/" }, "← all runs")),
      h("h2", {}, "Run ", h("code", { id: "run-id" }, metrics.runId)),
      h("p", { class: "note" }, `${metrics.count} results`,
        metrics.updatedAt ? `, last update ${when(metrics.updatedAt)}` : "", "."),
      metrics.changedQrels ? h("p", { class: "warning", id: "changed-qrels" },
        `⚠ Mixed golden sets: ${metrics.changedQrels} of ${metrics.count} results were ` +
        "scored against qrels that have since changed, so these means are no trend " +
        "(docs/api.md).") : null,
      h("table", { id: "run-metrics" },
        h("caption", { class: "note" }, "Means with 95% intervals (Wilson, docs/api.md)."),
        h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "metric"),
          h("th", { scope: "col", class: "number" }, "mean"),
          h("th", { scope: "col", class: "number" }, "95% interval"))),
        h("tbody", {}, METRICS.map(([key, label]) => h("tr", { "data-metric": key },
          h("th", { scope: "row" }, label),
          numberCell(metrics.metrics[key]),
          h("td", { class: "number" }, interval(metrics.ci95 && metrics.ci95[key])))))),
      lossSplitSection(metrics),
      h("h2", {}, "Risk–coverage"),
      riskSection(risk),
      h("h2", {}, "Per facet"),
      facets.length === 0 ? h("p", { class: "note" }, "This run has no facets.") : null,
      facets.map(([facet, values]) => facetSection(facet, values)),
    ];
  }

  /** Where the nDCG@10 loss goes, overall and per facet value: what the ranking left
   * out (first stage, 1 − candidate nDCG@10) and what its order cost (a reranker's job,
   * candidate nDCG@10 − nDCG@10). */
  function lossSplitSection(metrics) {
    if (!metrics.metrics || missing(metrics.metrics.candidateNdcgAt10)) return null;
    const rows = [["all", "", metrics]];
    for (const [facet, values] of Object.entries(metrics.facets || {})) {
      for (const [value, aggregate] of Object.entries(values)) rows.push([facet, value, aggregate]);
    }
    return [
      h("h2", {}, "nDCG@10 loss: first stage vs ordering"),
      h("p", { class: "note" }, "First stage: 1 − candidate nDCG@10, the gain the returned ids " +
        "could never reach in any order. Ordering: candidate nDCG@10 − nDCG@10, what a " +
        "reranker could still win with these candidates. Judged@k: how much of the top k " +
        "the golden set covers (low: a stale golden set, not a worse retriever)."),
      h("table", { id: "loss-split" },
        h("thead", {}, h("tr", {}, ["facet", "value"].map((label) => h("th", { scope: "col" }, label)),
          ["results", "nDCG@10", "candidate nDCG@10", "first-stage loss", "ordering loss", "Judged@k"]
            .map((label) => h("th", { scope: "col", class: "number" }, label)))),
        h("tbody", {}, rows.map(([facet, value, aggregate]) => {
          const m = aggregate.metrics;
          return h("tr", { "data-facet": facet, "data-value": value },
            h("th", { scope: "row" }, facet), h("td", {}, value),
            numberCell(aggregate.count, String(aggregate.count)),
            numberCell(m.ndcgAt10), numberCell(m.candidateNdcgAt10),
            h("td", { class: "number", "data-loss": "firstStage", "data-value": 1 - m.candidateNdcgAt10 },
              fixed(1 - m.candidateNdcgAt10)),
            h("td", { class: "number", "data-loss": "ordering", "data-value": m.candidateNdcgAt10 - m.ndcgAt10 },
              fixed(m.candidateNdcgAt10 - m.ndcgAt10)),
            numberCell(m.judgedAtK));
        }))),
    ];
  }

  function riskSection(risk) {
    if (!risk.withConfidence) {
      return h("p", { class: "note", id: "risk-none" },
        "No ranking of this run has a confidence, so there is no risk–coverage curve.");
    }
    return [
      h("p", { class: "note" }, `${risk.withConfidence} rankings with a confidence, ` +
        `${risk.withoutConfidence} without. Lower is better; E-AURC = AURC − optimal AURC ` +
        "is what the confidence costs."),
      h("table", { id: "risk-table" },
        h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "loss"),
          ["AURC", "optimal AURC", "E-AURC"].map((label) =>
            h("th", { scope: "col", class: "number" }, label)))),
        h("tbody", {}, LOSSES.map(([loss, label]) => h("tr", { "data-loss": loss },
          h("th", { scope: "row" }, label),
          numberCell(risk[loss].aurc), numberCell(risk[loss].optimalAurc),
          numberCell(risk[loss].eAurc))))),
      riskChart(risk),
    ];
  }

  function facetSection(facet, values) {
    const id = `facet-${facet}`.replace(/[^\w-]/g, "_");
    const entries = Object.entries(values);
    const rows = entries.map(([value, aggregate]) => ({ value, ...aggregate }));
    const order = sorting[id] || { key: "count", dir: "desc" };
    const chartMetric = METRICS.find(([key]) => key === order.key) || METRICS.find(([key]) => key === "ndcgAt10");
    const byTable = [...rows].sort((x, y) => (y.metrics[chartMetric[0]] - x.metrics[chartMetric[0]]));
    return h("section", { "aria-labelledby": `${id}-title` },
      h("h3", { id: `${id}-title` }, facet),
      h("div", { class: "facet" },
        sortableTable(id, `${facet}: sort by any column; the chart shows the sorted metric ` +
          "(nDCG@10 otherwise).",
        [
          { key: "value", label: "value", value: (r) => r.value,
            cell: (r) => h("th", { scope: "row" }, r.value) },
          { key: "count", label: "results", number: true, value: (r) => r.count,
            cell: (r) => numberCell(r.count, String(r.count)) },
          ...METRICS.map(([key, label]) => ({
            key, label, number: true, value: (r) => r.metrics[key],
            cell: (r) => numberCell(r.metrics[key]),
          })),
        ], rows, { key: "count", dir: "desc" }),
        facetChart(facet, byTable.map((r) => [r.value, r]), chartMetric)));
  }

  /** The paired anytime interval of nDCG@10 against the number of paired queries. */
  function trajectoryChart(path, label) {
    const width = 520;
    const height = 240;
    const margin = { left: 56, right: 16, top: 16, bottom: 44 };
    const plotWidth = width - margin.left - margin.right;
    const plotHeight = height - margin.top - margin.bottom;
    const last = path[path.length - 1][0];
    const top = Math.max(...path.map((p) => Math.abs(p[1])), ...path.map((p) => Math.abs(p[2])), 0.05);
    const logLast = Math.log10(Math.max(last, 2));
    const x = (n) => margin.left + (Math.log10(n) / logLast) * plotWidth;
    const y = (value) => margin.top + plotHeight / 2 - (value / top) * (plotHeight / 2);
    const line = (index) => path.map((p, i) => `${i ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[index]).toFixed(1)}`).join(" ");
    const ticks = [1, 10, 100, 1000, 10000, 100000].filter((t) => t <= last);
    return svg("svg", {
      id: "trajectory-chart", viewBox: `0 0 ${width} ${height}`, width, height, role: "img",
      "aria-labelledby": "trajectory-chart-title",
    },
    svg("title", { id: "trajectory-chart-title" },
      `Anytime-valid interval of the paired ${label} difference (B − A) against paired queries`),
    ticks.map((t) => [
      svg("line", { class: "grid", x1: x(t), x2: x(t), y1: margin.top, y2: margin.top + plotHeight }),
      svg("text", { x: x(t), y: margin.top + plotHeight + 16, "text-anchor": "middle" }, String(t)),
    ]),
    [-top, 0, top].map((v) => [
      svg("line", { class: v === 0 ? "axis" : "grid", x1: margin.left, x2: margin.left + plotWidth, y1: y(v), y2: y(v) }),
      svg("text", { x: margin.left - 6, y: y(v) + 4, "text-anchor": "end" }, signed(v)),
    ]),
    svg("path", { class: "curve bound", d: line(1) }),
    svg("path", { class: "curve bound", d: line(2) }),
    svg("text", { x: margin.left + plotWidth / 2, y: height - 6, "text-anchor": "middle" },
      "paired queries (log scale)"));
  }

  /** Per facet value both runs have: Δ and its anytime interval, alpha split over the table. */
  function facetComparison(facets) {
    const rows = [];
    for (const [facet, values] of Object.entries(facets.values)) {
      for (const [value, entry] of Object.entries(values)) {
        for (const [key, label] of METRICS) {
          const m = entry.metrics[key];
          rows.push({ id: `${facet}=${value} ${key}`, facet, value, label, ...m,
            countA: entry.countA, countB: entry.countB, significant: excludesZero(m.anytime95) });
        }
      }
    }
    if (rows.length === 0) return h("p", { class: "note" }, "No facet value is in both runs.");
    return sortableTable("facet-compare", `Per facet value (unpaired). Significant: the anytime-valid ` +
      `interval at alpha ${facets.alphaEach.toPrecision(2)} each (alpha split over these ` +
      `${facets.family} comparisons) excludes 0.`, [
      { key: "facet", label: "facet", value: (r) => r.facet, cell: (r) => h("td", {}, r.facet) },
      { key: "value", label: "value", value: (r) => r.value, cell: (r) => h("td", {}, r.value) },
      { key: "metric", label: "metric", value: (r) => r.label, cell: (r) => h("td", {}, r.label) },
      { key: "delta", label: "Δ (B − A)", number: true, value: (r) => r.delta,
        cell: (r) => numberCell(r.delta, signed(r.delta)) },
      { key: "anytime", label: "anytime interval", number: true, value: (r) => r.anytime95 && r.anytime95[0],
        cell: (r) => h("td", { class: "number" }, interval(r.anytime95)) },
      { key: "significant", label: "significant", value: (r) => (r.significant ? 1 : 0),
        cell: (r) => h("td", { class: r.significant ? (r.delta > 0 ? "better" : "worse") : null },
          r.significant ? (r.delta > 0 ? "yes ▲ B higher" : "yes ▼ B lower") : "no") },
    ], rows, { key: "significant", dir: "desc" });
  }

  function compareView({ comparison: c }) {
    const verdict = (row) => {
      if (!row.significant) return h("td", {}, "no");
      const better = row.direction > 0;
      return h("td", { class: better ? "better" : "worse" },
        `yes ${row.marks || ""} ${better ? "▲ B higher" : "▼ B lower"}`.replace(/\s+/g, " "));
    };
    return [
      h("p", {}, h("a", { href: "#/" }, "← all runs")),
      h("h2", {}, "Compare ", h("a", { href: runLink(c.runA) }, c.runA), " (A) with ",
        h("a", { href: runLink(c.runB) }, c.runB), " (B)"),
      h("p", { class: "note" }, `A: ${c.countA} results, B: ${c.countB} results, ` +
        `${c.queries} queries answered by both. ${c.note}`),
      h("table", { id: "compare-table" },
        h("thead", {}, h("tr", {},
          ["metric"].map((label) => h("th", { scope: "col" }, label)),
          ["A", "B", "Δ (B − A)", c.live ? "anytime interval" : null, "fixed 95% interval",
            "paired Δ", c.live ? "paired anytime interval" : null, "paired fixed 95% interval",
            "wins", "losses", "ties"].filter(Boolean).map((label) => h("th", { scope: "col", class: "number" }, label)),
          h("th", { scope: "col" }, "significant"))),
        h("tbody", {}, c.rows.map((row) => h("tr", {
          "data-metric": row.key, class: row.significant ? "significant" : null,
        },
        h("th", { scope: "row" }, row.label),
        numberCell(row.a), numberCell(row.b), numberCell(row.delta, signed(row.delta)),
        c.live ? h("td", { class: "number anytime" }, interval(row.anytime95)) : null,
        h("td", { class: "number" }, interval(row.ci95)),
        numberCell(row.pairedDelta, signed(row.pairedDelta)),
        c.live ? h("td", { class: "number anytime" }, interval(row.pairedAnytime95)) : null,
        h("td", { class: "number" }, interval(row.pairedCi95)),
        numberCell(row.wins, String(row.wins)), numberCell(row.losses, String(row.losses)),
        numberCell(row.ties, String(row.ties)),
        verdict(row))))),
      h("p", { class: "note" }, "Wins count the queries where B scored higher than A."),
      c.trajectory && c.trajectory.ndcgAt10 && c.trajectory.ndcgAt10.length ? [
        h("h3", {}, "How the paired nDCG@10 interval narrowed"),
        h("p", { class: "note" }, "The anytime-valid interval of the paired nDCG@10 difference " +
          "after each number of paired queries (in the order the pairs completed): once it " +
          "leaves 0, the difference is significant whenever it is read."),
        trajectoryChart(c.trajectory.ndcgAt10, "nDCG@10"),
      ] : null,
      c.facets ? [h("h3", {}, "Per facet value"), facetComparison(c.facets)] : null,
    ];
  }

  const VIEWS = { list: listView, run: runView, compare: compareView };

  // ---- Rendering and refreshing -------------------------------------------------------
  function showProblem(message) {
    const box = document.getElementById("problem");
    box.textContent = message;
    box.hidden = !message;
  }

  function render() {
    if (!state.data) return;
    const focused = document.activeElement && document.activeElement.id;
    const main = document.getElementById("main");
    main.replaceChildren(...[VIEWS[state.route.view](state.data)].flat(3).filter(Boolean));
    main.dataset.view = state.route.view;
    if (focused) {
      const again = document.getElementById(focused);
      if (again) again.focus();
    }
  }

  async function refresh(routeChanged) {
    const route = routeOf(location.hash);
    try {
      const data = await load(route);
      const fingerprint = JSON.stringify(data);
      if (routeChanged || fingerprint !== state.fingerprint || route.view !== state.route?.view) {
        state.route = route;
        state.data = data;
        state.fingerprint = fingerprint;
        render();
        if (state.source.live) {
          document.getElementById("status").textContent =
            `updated ${when(new Date().toISOString().replace("Z", "+00:00"))}, checked every ${POLL_MS / 1000} s`;
        }
      }
      showProblem("");
    } catch (failure) {
      if (routeChanged) {
        state.route = route;
        state.data = null;
        state.fingerprint = null;
        document.getElementById("main").replaceChildren(h("p", {}, h("a", { href: "#/" }, "← all runs")));
      }
      showProblem(failure.message);
    }
  }

  function start() {
    const embedded = document.getElementById("evals-document");
    const offline = embedded && embedded.textContent.trim();
    state.source = offline ? offlineSource(JSON.parse(offline)) : liveSource();
    document.getElementById("source").textContent = state.source.description;
    window.addEventListener("hashchange", () => refresh(true));
    refresh(true);
    if (state.source.live) {
      setInterval(() => { if (!document.hidden) refresh(false); }, POLL_MS);
    }
  }

  start();
})();
