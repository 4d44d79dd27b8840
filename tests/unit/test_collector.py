"""The garbage collector as the worker runs it: thresholds, freezing, timed collections."""

from __future__ import annotations

import gc

import pytest
from prometheus_client import generate_latest
from pydantic import ValidationError

from scorer.settings import Settings
from scorer.stream import collector
from scorer.stream.faust_edge.wiring import EdgeConfig
from scorer.stream.telemetry import Telemetry


@pytest.fixture
def restored_gc():
    """The collector's thresholds and frozen objects as they were before the test."""
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)
    gc.enable()


def test_settle_after_recovery_freezes_what_is_alive_and_sets_the_thresholds(restored_gc):
    table = [{"entry": i} for i in range(1000)]
    gc.unfreeze()
    settle_after_recovery = collector.settle_after_recovery
    settle_after_recovery((12_345, 7, 30))
    assert gc.get_threshold() == (12_345, 7, 30)
    assert gc.get_freeze_count() >= len(table)
    settle_after_recovery()
    assert gc.get_threshold() == collector.THRESHOLDS == (50_000, 20, 100)


def test_settle_before_recovery_sets_the_thresholds_and_freezes_nothing(restored_gc):
    """Made with the consumer, before any table is recovered: the recovered entries are
    not yet alive to freeze, and the import-time heap stays collectable."""
    gc.unfreeze()
    collector.settle_before_recovery((23_456, 9, 40))
    assert gc.get_threshold() == (23_456, 9, 40)
    assert gc.get_freeze_count() == 0
    collector.settle_before_recovery()
    assert gc.get_threshold() == collector.THRESHOLDS


def test_collections_are_timed_per_generation(restored_gc):
    times = collector.time_collections()
    assert collector.time_collections() is times
    assert gc.callbacks.count(times) == 1  # installed once, however often asked
    gc.disable()  # no automatic collection between the readings
    for generation in (0, 1, 2):
        seconds, made = list(times.seconds), list(times.collections)
        cycles = []
        for _ in range(2000):
            node: list = []
            node.append(node)
            cycles.append(node)
        del cycles, node
        gc.collect(generation)
        assert times.collections[generation] == made[generation] + 1
        assert times.seconds[generation] > seconds[generation]
        others = [g for g in (0, 1, 2) if g != generation]
        assert [times.collections[g] for g in others] == [made[g] for g in others]


def test_telemetry_exports_the_timed_collections(restored_gc):
    telemetry = Telemetry([], 5)
    gc.disable()
    gc.collect(2)
    times = collector.COLLECTIONS
    lines = generate_latest(telemetry.registry).decode().splitlines()
    for generation in (0, 1, 2):
        assert (
            f'scorer_gc_collections_total{{generation="{generation}"}} '
            f"{float(times.collections[generation])}" in lines
        )
        exported = next(
            line
            for line in lines
            if line.startswith(f'scorer_gc_seconds_total{{generation="{generation}"}}')
        )
        assert float(exported.split()[-1]) == pytest.approx(times.seconds[generation])
    assert times.collections[2] >= 1


def test_gc_thresholds_setting(monkeypatch):
    assert Settings().gc_thresholds == collector.THRESHOLDS
    monkeypatch.setenv("SCORER_GC_THRESHOLDS", "[20000, 10, 50]")
    settings = Settings()
    assert settings.gc_thresholds == (20_000, 10, 50)
    assert EdgeConfig.from_settings(settings).gc_thresholds == (20_000, 10, 50)
    monkeypatch.setenv("SCORER_GC_THRESHOLDS", "[0, 10, 10]")
    with pytest.raises(ValidationError, match="gc_thresholds"):
        Settings()
    monkeypatch.setenv("SCORER_GC_THRESHOLDS", "[1000, 10]")
    with pytest.raises(ValidationError, match="gc_thresholds"):
        Settings()
