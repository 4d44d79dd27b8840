"""``scorer export`` against a real broker: the results topic, by run and by time range,
as JSONL that ``scorer eval`` scores exactly as it scores the same events from a file
(what-if scoring of real traffic against another golden set)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from schemas import RetrievalResult
from scorer.kafka.topics import ensure_topics
from scorer.settings import Settings
from tests.support.kafka import settings_for
from tests.support.worker import SCORER, worker_env

pytestmark = pytest.mark.integration

HOUR_MS = 3_600_000
T0 = 1_780_000_000_000
"""A fixed moment (2026-05-28T...Z) the records' timestamps count from."""


def result(n: int, run: str) -> RetrievalResult:
    return RetrievalResult(
        result_id=f"{run}-{n}",
        run_id=run,
        query_id=f"q{n % 7}",
        ranked=[f"d{(n + i) % 11}" for i in range(5)],
        facets={"tenant": "a" if n % 2 else "b"},
    )


def send(settings: Settings, records: list[tuple[bytes, int]]) -> None:
    """``(value, timestamp_ms)`` to the results topic, keyed as the worker expects."""

    async def run() -> None:
        producer = AIOKafkaProducer(**settings.aiokafka_options(), enable_idempotence=True)
        await producer.start()
        try:
            for value, timestamp in records:
                key = (
                    RetrievalResult.model_validate_json(value).query_id.encode()
                    if (b'"queryId"' in value)
                    else b"x"
                )
                await producer.send(settings.results_topic, value, key=key, timestamp_ms=timestamp)
            await producer.flush()
        finally:
            await producer.stop()

    asyncio.run(run())


def scorer(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SCORER, *args], env=worker_env(settings), capture_output=True, text=True, timeout=120
    )


def test_export_selects_runs_and_time_and_eval_scores_it_as_the_events_themselves(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    settings = settings_for(kafka_bootstrap, tmp_path, partitions=3)
    ensure_topics(settings)
    # Hour 0: runs a and b; hour 1: a again; hour 2: a, after the range asked for.
    hour0 = [result(n, run) for n in range(40) for run in ("a", "b")]
    hour1 = [result(n, "a") for n in range(40, 70)]
    hour2 = [result(n, "a") for n in range(70, 80)]
    records = [(r.to_json_bytes(), T0 + n) for n, r in enumerate(hour0)]
    records += [(b"{truncated", T0 + 100), (b'{"resultId": "x"}', T0 + 101)]
    records += [(r.to_json_bytes(), T0 + HOUR_MS + n) for n, r in enumerate(hour1)]
    records += [(r.to_json_bytes(), T0 + 2 * HOUR_MS + n) for n, r in enumerate(hour2)]
    send(settings, records)

    exported = tmp_path / "a.jsonl"
    done = scorer(
        settings, "export", "--run", "a", "--since", "2026-05-28T00:00:00Z",
        "--until", str(_iso(T0 + 2 * HOUR_MS)), "-o", str(exported),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = exported.read_bytes().splitlines()
    got = sorted(RetrievalResult.model_validate_json(line).result_id for line in lines)
    want = sorted(r.result_id for r in hour0 + hour1 if r.run_id == "a")
    assert got == want
    summary = done.stderr.strip().splitlines()[-1]
    assert summary.startswith(f"export: {len(want)} results to {exported}; from ")
    assert "40 of other runs" in summary
    assert "2 not valid results" in summary
    assert "10 after --until" in summary

    # --since as a time between the hours leaves hour 0 out; all runs without --run.
    later = scorer(settings, "export", "--since", _iso(T0 + HOUR_MS // 2), "-o", "-")
    assert later.returncode == 0, later.stderr
    assert sorted(
        RetrievalResult.model_validate_json(line).result_id for line in later.stdout.splitlines()
    ) == sorted(r.result_id for r in hour1 + hour2)

    # scorer eval on the export = scorer eval on the events written to a file directly.
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("".join(f"q{q} 0 d{(q * 3) % 11} {1 + q % 3}\n" for q in range(7)))
    direct = tmp_path / "direct.jsonl"
    kept = [r for r in hour0 + hour1 if r.run_id == "a"]
    direct.write_bytes(b"".join(r.to_json_bytes() + b"\n" for r in kept))
    via_export = scorer(settings, "eval", str(qrels), str(exported), "--format", "json")
    from_file = scorer(settings, "eval", str(qrels), str(direct), "--format", "json")
    assert via_export.returncode == 0, via_export.stderr
    # The same numbers, but for the order of summation (the export is in partition order).
    assert json.loads(via_export.stdout) == _approx(json.loads(from_file.stdout))
    assert json.loads(via_export.stdout)["runs"]["a"]["count"] == len(want)


def test_export_names_a_bad_time_in_one_line(kafka_bootstrap: str, tmp_path: Path) -> None:
    settings = settings_for(kafka_bootstrap, tmp_path, partitions=1)
    done = scorer(settings, "export", "--since", "last tuesday")
    assert done.returncode == 2
    assert "'last tuesday' is neither a duration (7d, 24h, 90m) nor an ISO 8601 time" in done.stderr


def _iso(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()


def _approx(document: object) -> object:
    """``document`` with every float compared to 1e-12."""
    if isinstance(document, dict):
        return {key: _approx(value) for key, value in document.items()}
    if isinstance(document, list):
        return [_approx(value) for value in document]
    if isinstance(document, float):
        return pytest.approx(document, rel=1e-12, abs=1e-15)
    return document
