"""The topic plan and the join's contract (scorer.kafka.topics), without a broker: which
topics the scorer wants and how, what an existing topic must satisfy, and the lag
arithmetic that ``scorer topics`` prints. tests/integration/test_kafka_topics.py
checks the same against a real broker."""

from __future__ import annotations

import pytest

from scorer.kafka.topics import (
    PartitionOffsets,
    TopicMismatchError,
    TopicReport,
    TopicState,
    _check_join_contract,
    wanted_topics,
)
from scorer.settings import Settings


def settings(**overrides: object) -> Settings:
    return Settings(partitions=4, replication_factor=1, **overrides)


def test_wanted_topics_are_every_topic_with_the_configured_partitions() -> None:
    chosen = settings()
    topics = {topic.name: topic for topic in wanted_topics(chosen)}
    assert set(topics) == {
        chosen.results_topic,
        chosen.qrels_topic,
        chosen.scored_topic,
        chosen.deadletter_topic,
        chosen.rollup_topic,
    }
    for topic in topics.values():
        assert topic.num_partitions == 4
        assert topic.replication_factor == 1
    # Only the golden set is compacted: the latest qrels of a query is all that counts.
    assert topics[chosen.qrels_topic].topic_configs == {"cleanup.policy": "compact"}
    assert all(
        topic.topic_configs == {} for name, topic in topics.items() if name != chosen.qrels_topic
    )


def states(chosen: Settings, results: int, qrels: int, policy: str) -> list[TopicState]:
    return [
        TopicState(chosen.results_topic, results, {"cleanup.policy": "delete"}),
        TopicState(chosen.qrels_topic, qrels, {"cleanup.policy": policy}),
    ]


def test_the_join_contract_holds_for_co_partitioned_topics_and_a_compacted_golden_set() -> None:
    chosen = settings()
    _check_join_contract(chosen, states(chosen, 4, 4, "compact"))
    _check_join_contract(chosen, states(chosen, 4, 4, "compact,delete"))


@pytest.mark.parametrize(
    ("results", "qrels", "policy", "message"),
    [
        (4, 2, "compact", "must both have SCORER_PARTITIONS=4"),
        (8, 8, "compact", "must both have SCORER_PARTITIONS=4"),
        (4, 4, "delete", "cleanup.policy=delete, but the golden set needs compact"),
    ],
)
def test_a_broken_join_contract_is_one_clear_error(
    results: int, qrels: int, policy: str, message: str
) -> None:
    chosen = settings()
    with pytest.raises(TopicMismatchError, match=message) as raised:
        _check_join_contract(chosen, states(chosen, results, qrels, policy))
    assert "\n" not in str(raised.value)


def test_lag_is_what_the_group_has_yet_to_read() -> None:
    assert PartitionOffsets(0, end=120, committed=100).lag == 20
    assert PartitionOffsets(0, end=120, committed=120).lag == 0
    # Compaction or a reset can leave a committed offset past the end: no negative lag.
    assert PartitionOffsets(0, end=120, committed=130).lag == 0
    assert PartitionOffsets(0, end=120, committed=None).lag is None


def test_a_topics_end_and_lag_sum_its_partitions() -> None:
    report = TopicReport(
        "results",
        exists=True,
        cleanup_policy="delete",
        partitions=[
            PartitionOffsets(0, end=50, committed=40),
            PartitionOffsets(1, end=70, committed=None),
            PartitionOffsets(2, end=30, committed=25),
        ],
    )
    assert report.end == 150
    assert report.lag == 15  # the partition without a commit is left out
    assert TopicReport("x", exists=True, cleanup_policy="delete").lag is None
    assert TopicReport("x", exists=False, cleanup_policy="").end == 0
