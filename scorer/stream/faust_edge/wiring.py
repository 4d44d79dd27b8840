"""What the edge is told (:class:`EdgeConfig`), and how Faust's consumer finds it.

Faust builds the consumer itself (``App._new_consumer`` calls
``Transport.create_consumer``), so the guarded consumer cannot be handed its
parts as arguments. :func:`attach` files an app's :class:`~scorer.stream.faust_edge.Edge`
under the app; :class:`~scorer.stream.faust_edge.consumer.GuardedConsumer` reads
it in its ``__init__`` (``edge_of(self.app)``), one fixed class for every app,
instead of a subclass generated per app to carry the knobs as class attributes.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scorer.settings import FAUST_COMMIT_EVERY
from scorer.stream.collector import THRESHOLDS

if TYPE_CHECKING:
    from scorer.settings import Settings
    from scorer.stream.faust_edge import Edge


@dataclass(frozen=True)
class EdgeConfig:
    """Everything the Faust edge is told, in one object (``from_settings``)."""

    exactly_once: bool
    """The processing guarantee: every part of the edge reads it from here (through
    ``Recovery.exactly_once``), not from Faust's ``app.in_transaction``, which is
    cached on its first read and False until the app runs in a worker."""
    fetch_max_wait_ms: int
    """How long a fetch waits at the broker for records (aiokafka's
    ``fetch_max_wait_ms``; see docs/faust-internals.md for Faust's hidden waits)."""
    stop_timeout_seconds: float
    """The longest a stop takes before the worker exits anyway."""
    metrics_prefix: str = "retrieval_scorer"
    """Faust's own series' prefix (fixed: the rules and dashboards name them)."""
    caught_up_commit_seconds: float = 0.0
    """Under exactly_once, a worker that has caught up commits its batches at once, at
    most this often (0: only on Faust's timer)."""
    caught_up_lag_records: int = 0
    """How many records from its end an input partition counts as caught up."""
    gc_thresholds: tuple[int, int, int] = THRESHOLDS
    """The collector's thresholds from the consumer's start, through recovery and after
    (``collector``)."""
    commit_every_records: int | None = FAUST_COMMIT_EVERY
    """Offsets are also committed after this many input records are booked (None: on
    the commit interval and, under exactly_once, once caught up only); Faust's
    ``broker_commit_every`` by default."""
    batch_max_records: int | None = None
    """A routed topic's fetched batches are handed over in parts of at most this many
    records (None: whole), but the background topics'."""

    @classmethod
    def from_settings(cls, settings: Settings) -> EdgeConfig:
        return cls(
            exactly_once=settings.processing_guarantee == "exactly_once",
            fetch_max_wait_ms=settings.kafka_fetch_max_wait_ms,
            stop_timeout_seconds=settings.stop_timeout_seconds,
            caught_up_commit_seconds=settings.caught_up_commit_seconds,
            caught_up_lag_records=settings.caught_up_lag_records,
            commit_every_records=settings.commit_every(),
            batch_max_records=settings.batch_max_records,
            gc_thresholds=settings.gc_thresholds,
        )


_EDGES: weakref.WeakKeyDictionary[Any, Edge] = weakref.WeakKeyDictionary()


def attach(app: Any, edge: Edge) -> None:
    """File ``edge`` under ``app`` for the consumer Faust will build."""
    _EDGES[app] = edge


def edge_of(app: Any) -> Edge:
    """The edge installed on ``app``; a clear error when there is none."""
    try:
        return _EDGES[app]
    except KeyError:
        raise RuntimeError(
            f"no Faust edge is installed on the app {getattr(app, 'conf', None) and app.conf.id!r}"
            " (faust_edge.install must run before the app builds its consumer)"
        ) from None
