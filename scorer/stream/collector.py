"""The garbage collector as the worker runs it: while its tables are recovered and after.

The worker calls :func:`settle_before_recovery` when its consumer is made and
:func:`settle_after_recovery` when the tables are recovered
(``faust_edge.consumer.GuardedConsumer.perform_seek``); a harness that measures
the handlers (``bench/stream_growth.py``, ``bench/stream_stages.py``) calls it once
its tables are loaded, so that its figures are the worker's and not inflated by
collections the worker does not make.

:data:`COLLECTIONS` times every collection the process makes (a ``gc`` callback,
installed by :func:`time_collections`); the worker exports the totals as
``scorer_gc_seconds_total`` and ``scorer_gc_collections_total`` by generation.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from scorer.settings import GC_THRESHOLDS

THRESHOLDS = GC_THRESHOLDS
"""``gc.set_threshold``'s three from the consumer's start on (the setting
``gc_thresholds``; CPython's defaults are 700, 10, 10): the youngest generation is
collected every 50,000 net allocations of containers, the middle one every 20 of
those, the whole heap (but what is frozen) after 100 of those at the earliest."""


def settle_before_recovery(thresholds: tuple[int, int, int] = THRESHOLDS) -> None:
    """Set the collector's ``thresholds`` before the tables are recovered: recovery
    makes the tables' containers by the million, and at CPython's 700, 10, 10 whole-heap
    collections walked the growing tables again and again (2.4 of 14.1 s recovering
    300,000 judged queries into a memory store: ``bench/stream_state.py``)."""
    gc.set_threshold(*thresholds)


def settle_after_recovery(thresholds: tuple[int, int, int] = THRESHOLDS) -> None:
    """Freeze what is alive now (the recovered tables live as long as the worker) and
    set the collector's ``thresholds`` (``gc.set_threshold``'s three)."""
    # Out of the collector's reach, full collections no longer walk the tables
    # (measured in bench/stream.py: gen-2 pauses of 30-240 ms, 365-765 ms in all per
    # run, fell to 100-160 ms; with a million judged queries they would take seconds).
    gc.freeze()
    # Nearly every container a result makes is freed by its reference count within
    # the batch: a collection finds the batch's live working set and frees nothing.
    # With CPython's 700 the youngest generation was collected every few results
    # (about 3 µs a result); at 10,000, 1.1-1.3% of the worker's busy CPU went to
    # collections, at these thresholds about 0.0-0.2% (bench/stream.py, timed by
    # COLLECTIONS; docs/benchmarks.md).
    gc.set_threshold(*thresholds)


class CollectionTimes:
    """Seconds spent in the garbage collector and collections made, per generation,
    since it was installed (``gc.callbacks``: called at the start and the stop of every
    collection, about a microsecond each)."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.collections = [0, 0, 0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        generation = info["generation"]
        self.seconds[generation] += time.perf_counter() - self._started
        self.collections[generation] += 1


COLLECTIONS = CollectionTimes()
"""This process's collections, timed once :func:`time_collections` has run."""


def time_collections() -> CollectionTimes:
    """Time every collection from now on into :data:`COLLECTIONS` (once per process)."""
    if COLLECTIONS not in gc.callbacks:
        gc.callbacks.append(COLLECTIONS)
    return COLLECTIONS
