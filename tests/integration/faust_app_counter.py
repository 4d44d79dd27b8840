"""A minimal Faust app for the integration tests: a changelog-backed table of counts.

Every event on the source topic (key = a name, value = an event id) adds one
to the name's count in the ``counts`` table and emits ``{"event", "count"}``
to the sink topic. A worker restarted from the changelog alone (memory store)
must continue the counts where the last one stopped.

Run by the tests as ``python faust_app_counter.py worker``; configured by the
environment: COUNTER_BOOTSTRAP, COUNTER_APP_ID, COUNTER_SOURCE, COUNTER_SINK,
COUNTER_PARTITIONS, COUNTER_DATADIR.
"""

from __future__ import annotations

import os

import faust

PARTITIONS = int(os.environ["COUNTER_PARTITIONS"])

app = faust.App(
    os.environ["COUNTER_APP_ID"],
    broker=f"kafka://{os.environ['COUNTER_BOOTSTRAP']}",
    store="memory://",
    datadir=os.environ["COUNTER_DATADIR"],
    web_enabled=False,
    topic_partitions=PARTITIONS,
    topic_replication_factor=1,
    broker_session_timeout=10.0,
    broker_heartbeat_interval=1.0,
)
source = app.topic(
    os.environ["COUNTER_SOURCE"],
    key_type=str,
    value_type=str,
    key_serializer="raw",
    value_serializer="raw",
    partitions=PARTITIONS,
)
sink = app.topic(os.environ["COUNTER_SINK"], key_serializer="raw", value_serializer="json")
counts = app.Table("counts", default=int, partitions=PARTITIONS)


@app.agent(source, concurrency=1)
async def count(events: faust.Stream[str]) -> None:
    async for name, event_id in events.items():
        counts[name] += 1
        await sink.send(key=name, value={"event": event_id, "count": counts[name]})


if __name__ == "__main__":
    app.main()
