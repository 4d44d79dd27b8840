"""The Faust forwarder of ``bench/stream.py``: one agent that sends every event on
unchanged, configured as the scorer's app is (acks=all, concurrency=1, raw bytes).
It measures what the framework alone costs.

    BENCH_BOOTSTRAP=... BENCH_APP_ID=... BENCH_INPUT=... BENCH_OUTPUT=... \
    BENCH_PARTITIONS=4 BENCH_DATADIR=... python bench/stream_forward.py worker --web-port N
"""

from __future__ import annotations

import os
from typing import Any

import faust

RAW = {"key_serializer": "raw", "value_serializer": "raw"}

app = faust.App(
    os.environ.get("BENCH_APP_ID", "bench-forward"),
    broker=f"kafka://{os.environ.get('BENCH_BOOTSTRAP', 'localhost:9092')}",
    store="memory://",
    datadir=os.environ.get("BENCH_DATADIR", "bench-forward-data"),
    topic_partitions=int(os.environ.get("BENCH_PARTITIONS", "4")),
    consumer_auto_offset_reset="earliest",
    producer_acks=-1,
    topic_allow_declare=True,
    autodiscover=False,
)
source = app.topic(os.environ.get("BENCH_INPUT", "bench.forward.in"), **RAW)
sink = app.topic(os.environ.get("BENCH_OUTPUT", "bench.forward.out"), **RAW)


@app.agent(source, concurrency=1)
async def forward(stream: Any) -> None:
    async for event in stream.events():
        await sink.send(key=event.message.key, value=event.message.value)


if __name__ == "__main__":
    app.main()
