"""The readiness verdict on the input topics: missing, then created (restart needed),
logged once per change; a failed lookup keeps the last verdict."""

from __future__ import annotations

import asyncio
import logging

from aiokafka.errors import KafkaConnectionError

from scorer.stream import web
from scorer.stream.web import InputTopics


def test_missing_then_created_late_then_fine_after_a_restart(monkeypatch, caplog) -> None:
    answers: list[list[str] | Exception] = [
        ["results", "qrels"],
        ["results", "qrels"],
        KafkaConnectionError("down"),
        [],
    ]

    async def missing_topics(options: object, names: list[str]) -> list[str]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(web, "missing_topics", missing_topics)
    inputs = InputTopics(["results", "qrels"])
    assert inputs.problem() == "looking up the input topics"
    with caplog.at_level(logging.WARNING, logger="scorer.stream.web"):
        for expected in (
            "input topics missing: results, qrels (run `scorer topics create`)",
            "input topics missing: results, qrels (run `scorer topics create`)",
            "input topics missing: results, qrels (run `scorer topics create`)",  # lookup failed
            "input topics created after start-up: qrels, results (restart the worker)",
        ):
            asyncio.run(inputs.check({}))
            assert inputs.problem() == expected
    assert [record.getMessage() for record in caplog.records] == [
        "input topics missing: results, qrels; this worker consumes nothing until you run "
        "`scorer topics create` and restart it"
    ]


def test_topics_present_from_the_start_are_no_problem(monkeypatch) -> None:
    async def missing_topics(options: object, names: list[str]) -> list[str]:
        return []

    monkeypatch.setattr(web, "missing_topics", missing_topics)
    inputs = InputTopics(["results", "qrels"])
    asyncio.run(inputs.check({}))
    assert inputs.problem() is None
