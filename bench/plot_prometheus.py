"""Draw the rolling per-facet nDCG@10 and recall@k curves from a Prometheus.

Reads the recording rules ``facet_value:scorer_retrieval_{ndcg_at_10,recall_at_k}:mean_rate5m``
with ``query_range`` and writes one PNG: a panel per metric, a line per value
of the facet, plus the overall (``all``) mean dashed.

    python bench/plot_prometheus.py --url http://127.0.0.1:9090 \\
        --facet type --minutes 30 --out docs/img/rolling-metrics.png
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.parse
import urllib.request
from datetime import datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates
import matplotlib.pyplot as plt

PANELS = (("ndcg_at_10", "nDCG@10"), ("recall_at_k", "Recall@k"))


def query_range(url: str, promql: str, start: float, end: float, step: float) -> list[dict]:
    """The matrix of ``promql`` over ``[start, end]``; raises on a Prometheus error."""
    params = urllib.parse.urlencode({"query": promql, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{url}/api/v1/query_range?{params}", timeout=30) as answer:
        body = json.load(answer)
    if body["status"] != "success":
        raise RuntimeError(f"{promql}: {body.get('error')}")
    return body["data"]["result"]


def plot(url: str, facet: str, window: str, minutes: float, out: Path) -> None:
    end = time.time()
    start = end - minutes * 60
    step = max(1.0, minutes * 60 / 600)
    figure, axes = plt.subplots(1, len(PANELS), figsize=(12, 4.2), sharex=True)
    for axis, (metric, title) in zip(axes, PANELS, strict=True):
        record = f"facet_value:scorer_retrieval_{metric}:mean_rate{window}"
        series = query_range(url, f'{record}{{facet="{facet}"}}', start, end, step)
        overall = query_range(url, f'{record}{{facet="all"}}', start, end, step)
        if not series:
            raise SystemExit(f"no {record} series for facet {facet!r} in the last {minutes} min")
        for line in sorted(series, key=lambda s: s["metric"]["value"]):
            times = [datetime.fromtimestamp(float(t)) for t, _ in line["values"]]
            axis.plot(times, [float(v) for _, v in line["values"]], label=line["metric"]["value"])
        for line in overall:
            times = [datetime.fromtimestamp(float(t)) for t, _ in line["values"]]
            values = [float(v) for _, v in line["values"]]
            axis.plot(times, values, "k--", linewidth=1.5, label="all")
        axis.set_title(f"{title}, {window} rolling mean by {facet}")
        axis.set_ylim(0, 1)
        axis.grid(alpha=0.3)
        axis.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M"))
    axes[-1].legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:9090", help="Prometheus base URL.")
    parser.add_argument("--facet", default="type", help="Facet whose values get a line each.")
    parser.add_argument("--window", default="5m", choices=("5m", "1h"))
    parser.add_argument("--minutes", type=float, default=30.0, help="Time span to draw.")
    parser.add_argument("--out", type=Path, default=Path("docs/img/rolling-metrics.png"))
    args = parser.parse_args()
    plot(args.url.rstrip("/"), args.facet, args.window, args.minutes, args.out)


if __name__ == "__main__":
    main()
