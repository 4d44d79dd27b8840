"""The value classes on ``scorer eval``'s start-up path behave as the dataclasses
they replaced: equal when their fields are, a repr naming them, caches ignored."""

from __future__ import annotations

import pickle

import pytest

from scorer.analysis.risk_coverage import RiskCoverage
from scorer.core.measures import MEASURES
from scorer.core.metrics import Judgments, score
from scorer.core.rollup import MetricAggregate, RunRollup
from scorer.io.qrels import JudgedQuery
from scorer.io.runs import Retrieval


def test_equal_when_the_fields_are_and_never_equal_to_another_class() -> None:
    assert JudgedQuery({"d1": 2}) == JudgedQuery({"d1": 2}, {})
    assert JudgedQuery({"d1": 2}) != JudgedQuery({"d1": 1})
    assert JudgedQuery({"d1": 2}, {"type": "list"}) != JudgedQuery({"d1": 2})
    assert Retrieval("r", "q", ["a"]) == Retrieval("r", "q", ["a"], None, None, None, None)
    assert Retrieval("r", "q", ["a"], k=5) != Retrieval("r", "q", ["a"])
    assert MetricAggregate() != RunRollup()
    assert (MetricAggregate() == object()) is False


def test_a_fold_compares_by_its_sums() -> None:
    judgments = Judgments.from_qrels({"a": 1, "b": 0})
    left, right = RunRollup(), RunRollup()
    for rollup in (left, right):
        rollup.add(score(["a", "c"], judgments, 10), {"type": "list"})
    assert left == right
    right.add(score(["c"], judgments, 10))
    assert left != right


def test_the_repr_names_each_field_in_order_and_hides_caches() -> None:
    assert repr(JudgedQuery({"d1": 2})) == "JudgedQuery(qrels={'d1': 2}, facets={})"
    block = RiskCoverage()
    block.curves()  # fills the cache
    assert repr(block) == (
        "RiskCoverage(confidences=array('d'), misses=bytearray(b''), "
        "ndcg_losses=array('d'), without_confidence=0)"
    )
    assert block == RiskCoverage()


def test_mutable_records_are_unhashable_and_measures_are_keys() -> None:
    with pytest.raises(TypeError):
        hash(MetricAggregate())
    assert {m: m.slot for m in MEASURES}[MEASURES[2]] == 2
    assert hash(MEASURES[0]) != hash(MEASURES[1])


def test_records_pickle() -> None:
    rollup = RunRollup()
    rollup.add([0.5] * len(MEASURES), {"type": "list"})
    assert pickle.loads(pickle.dumps(rollup)) == rollup
