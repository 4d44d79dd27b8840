"""The garbage collector as the worker runs it once its tables are recovered.

The worker calls :func:`settle_after_recovery` when the tables are recovered
(``faust_edge.consumer.GuardedConsumer.perform_seek``); a harness that measures
the handlers (``bench/stream_growth.py``, ``bench/stream_stages.py``) calls it once
its tables are loaded, so that its figures are the worker's and not inflated by
collections the worker does not make.
"""

from __future__ import annotations

import gc

YOUNG_GC_THRESHOLD = 10_000
"""Allocations between collections of the youngest generation once the tables are
recovered (CPython's default is 700)."""

THRESHOLDS = (YOUNG_GC_THRESHOLD, 10, 10)
"""``gc.set_threshold``'s three once the tables are recovered (the setting
``gc_thresholds``)."""


def settle_after_recovery(thresholds: tuple[int, int, int] = THRESHOLDS) -> None:
    """Freeze what is alive now (the recovered tables live as long as the worker) and
    set the collector's ``thresholds`` (``gc.set_threshold``'s three)."""
    # Out of the collector's reach, full collections no longer walk the tables
    # (measured in bench/stream.py: gen-2 pauses of 30-240 ms, 365-765 ms in all per
    # run, fell to 100-160 ms; with a million judged queries they would take seconds).
    gc.freeze()
    # Each result makes a few hundred short-lived containers: with the default
    # threshold (700) the youngest generation was collected every few results,
    # about 3 µs a result in all; at 10,000 about 1 µs (the handlers measured
    # alone), each collection still well under a millisecond.
    gc.set_threshold(*thresholds)
