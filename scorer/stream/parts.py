"""The parts of the streaming scorer that its handlers and agents share.

``scorer.stream.app.create_app`` builds one :class:`StreamParts` and hands it
to each module that registers a handler or an agent (``results``, ``qrels``,
``parking``, ``rollups``): one place that says what the worker is made of.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scorer.settings import Settings
from scorer.stream.faust_edge import Edge
from scorer.stream.placement import Misplaced
from scorer.stream.results import ParkedCount, Scoring
from scorer.stream.telemetry import Telemetry


@dataclass
class StreamParts:
    """Settings, topics, tables, telemetry and the Faust edge of one worker (outputs go
    to topics by name, ``settings.*_topic``: only consumed topics are Faust topics)."""

    app: Any
    settings: Settings
    telemetry: Telemetry
    edge: Edge
    results_topic: Any
    qrels_topic: Any
    rollup_topic: Any
    expiry_topic: Any
    qrels_table: Any
    parked_table: Any
    rollup_table: Any
    run_queries_table: Any
    seen_table: Any
    misplaced: Misplaced
    scoring: Scoring
    """Scores results and queues their run contributions (the results batches' and the
    qrels agent's releases)."""
    parked: ParkedCount = field(default_factory=ParkedCount)
    releasing: set[str] = field(default_factory=set)
    """Queries whose parked results the qrels agent is releasing now (between reading
    their parked entry and deleting it, while it waits for the broker)."""
    expiring: dict[str, float] = field(default_factory=dict)
    """Queries whose expiry command is on its way, and when it was sent (epoch seconds;
    sent again if the query is still parked long after)."""
    watched: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    """The overall verdicts of the watched pairs whose baseline this worker owns
    (``watch.pair_verdicts``), as last read; the run list warns from them."""
