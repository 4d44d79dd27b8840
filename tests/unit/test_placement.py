"""Home partitions of input keys, and the rerouted copies of misplaced records."""

from __future__ import annotations

import logging

import pytest
from aiokafka.partitioner import DefaultPartitioner
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter

from scorer.stream.placement import REROUTED_FROM, HomePartitions, Misplaced

# Kafka's own test vectors of the Java client's Utils.murmur2 (UtilsTest.testMurmur2); the
# client places a keyed record at Utils.toPositive(murmur2(key)) % partitions.
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"abc": 479470107,
}


@given(st.binary(min_size=0, max_size=64), st.integers(1, 64))
def test_a_keys_home_is_where_aiokafkas_default_partitioner_puts_it(key: bytes, n: int) -> None:
    partitions = list(range(n))
    assert HomePartitions(n).of(key) == DefaultPartitioner()(key, partitions, partitions)


def test_a_keys_home_is_where_the_java_client_puts_it() -> None:
    for key, hashed in JAVA_MURMUR2.items():
        positive = hashed & 0x7FFFFFFF
        for partitions in (3, 12, 0x7FFFFFFF):  # the last: the positive hash itself
            assert HomePartitions(partitions).of(key) == positive % partitions


def test_a_topic_without_partitions_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one partition"):
        HomePartitions(0)


def misplaced_counter() -> tuple[Misplaced, CollectorRegistry]:
    registry = CollectorRegistry()
    counter = Counter("scorer_misplaced", "test", ("topic",), registry=registry)
    return Misplaced(4, counter), registry


def test_a_record_on_its_home_partition_stays_and_one_elsewhere_goes_home() -> None:
    misplaced, _ = misplaced_counter()
    home = misplaced.homes.of(b"q-7")
    assert misplaced.home_if_misplaced(home, b"q-7") is None
    assert misplaced.home_if_misplaced((home + 1) % 4, b"q-7") == home
    assert misplaced.home_if_misplaced(0, None) is None  # no key: the handler decides


def test_a_rerouted_copy_keeps_the_record_and_says_where_it_was_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    misplaced, registry = misplaced_counter()
    with caplog.at_level(logging.WARNING):
        copies = [
            misplaced.reroute("results", 1, offset, b"q-7", b"{}", [("trace", b"t")], 2)
            for offset in (40, 41)
        ]
        misplaced.reroute("results", 3, 9, b"q-8", None, None, 0)
        misplaced.reroute("qrels", 1, 5, b"q-7", b"{}", (), 2)
    first = copies[0]
    assert (first.topic, first.key, first.value, first.partition) == ("results", b"q-7", b"{}", 2)
    assert first.headers == [("trace", b"t"), (REROUTED_FROM, b"results/1/40")]
    assert copies[1].headers[-1] == (REROUTED_FROM, b"results/1/41")
    assert registry.get_sample_value("scorer_misplaced_total", {"topic": "results"}) == 3
    assert registry.get_sample_value("scorer_misplaced_total", {"topic": "qrels"}) == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 3, "one warning per source partition"
    assert warnings[0].startswith("results/1: records keyed by queryId are not on the partition")
    assert "partitioner=murmur2_random" in warnings[0]
