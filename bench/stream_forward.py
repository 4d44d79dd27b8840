"""The Faust forwarder of ``bench/stream.py``: one agent that sends every event on
unchanged, configured as the scorer's app is (acks=all, concurrency=1, raw bytes,
the scorer's producer linger). It measures what the framework alone costs.

    BENCH_BOOTSTRAP=... BENCH_APP_ID=... BENCH_INPUT=... BENCH_OUTPUT=... \
    BENCH_PARTITIONS=4 BENCH_DATADIR=... python bench/stream_forward.py worker --web-port N

Variants, to take the scorer's costs apart one at a time:

- ``BENCH_HOPS=2``: the event also goes to a second topic keyed the same way,
  and a second agent consumes it in batches (``take_events``, as the scorer's
  rollup agent does) and drops it: the cost of a second pass through Faust's
  event path;
- ``BENCH_PROMETHEUS=1``: Faust's Prometheus sensors, as the scorer installs them;
- ``BENCH_FAUST_SETTINGS``: JSON of extra ``faust.App`` keyword arguments.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import faust

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scorer.settings import Settings

RAW = {"key_serializer": "raw", "value_serializer": "raw"}
SCORER = Settings()
"""The scorer's defaults: the forwarder runs with the same producer settings."""

app = faust.App(
    os.environ.get("BENCH_APP_ID", "bench-forward"),
    broker=f"kafka://{os.environ.get('BENCH_BOOTSTRAP', 'localhost:9092')}",
    store="memory://",
    datadir=os.environ.get("BENCH_DATADIR", "bench-forward-data"),
    topic_partitions=int(os.environ.get("BENCH_PARTITIONS", "4")),
    consumer_auto_offset_reset="earliest",
    producer_acks=-1,
    producer_linger=SCORER.producer_linger_seconds,
    topic_allow_declare=True,
    autodiscover=False,
    **json.loads(os.environ.get("BENCH_FAUST_SETTINGS", "{}")),
)
source = app.topic(os.environ.get("BENCH_INPUT", "bench.forward.in"), **RAW)
sink = app.topic(os.environ.get("BENCH_OUTPUT", "bench.forward.out"), **RAW)
HOPS = int(os.environ.get("BENCH_HOPS", "1"))

if os.environ.get("BENCH_PROMETHEUS"):
    from faust.sensors.prometheus import setup_prometheus_sensors
    from prometheus_client import CollectorRegistry

    setup_prometheus_sensors(app, registry=CollectorRegistry(), name_prefix="bench_forward")

if HOPS == 2:
    second = app.topic(
        os.environ.get("BENCH_INPUT", "bench.forward.in") + ".hop2",
        internal=True,  # declared by the app, as the scorer's topics are by `scorer topics`
        partitions=app.conf.topic_partitions,
        **RAW,
    )

    @app.agent(second, concurrency=1)
    async def drop(stream: Any) -> None:
        async for _events in stream.take_events(
            SCORER.rollup_batch_size, within=SCORER.rollup_batch_seconds
        ):
            pass


@app.agent(source, concurrency=1)
async def forward(stream: Any) -> None:
    async for event in stream.events():
        await sink.send(key=event.message.key, value=event.message.value)
        if HOPS == 2:
            await second.send(key=event.message.key, value=event.message.value)


if __name__ == "__main__":
    app.main()
