"""The worker's pure per-result stages, timed without a broker: decode, score,
telemetry, rollup contribution, fold.

What ``bench/stream.py`` cannot show: which part of a result's pure-Python work
costs what. The payloads are the streaming benchmark's. Each stage runs over
the same 3,000 results ``--passes`` times; the minimum pass is reported (on a
shared machine the minimum is the least disturbed), in µs per result.

    .venv/bin/python bench/stream_stages.py
    .venv/bin/python bench/stream_stages.py --code DIR   # another checkout's stages

``--code`` puts DIR first on the path (a ``git worktree add DIR COMMIT``), so two
versions can be compared back to back; run each a few times, alternating.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--code", type=Path, help="time this checkout's stages instead")
    parser.add_argument("--results", type=int, default=3000)
    parser.add_argument("--passes", type=int, default=15)
    parser.add_argument(
        "--commit-results",
        type=int,
        default=28_000,
        help="fold handler: results between two offset commits (2.8 s at 10,000/s)",
    )
    args = parser.parse_args()
    sys.path.insert(0, str(args.code or ROOT))
    sys.path.insert(1, str(ROOT))  # the payloads of bench/stream.py

    import orjson

    from bench.stream import Payloads
    from scorer.stream import events, run_state
    from scorer.stream.seen import SeenIndex
    from scorer.stream.telemetry import Telemetry

    try:
        from scorer.stream import stored
    except ImportError:  # older checkouts: records unversioned
        stored = None

    payloads = Payloads.generate(5000, args.results)
    table = {}
    for raw in payloads.golden:
        golden = events.decode_golden(raw)
        table[golden.query_id] = orjson.loads(orjson.dumps(events.golden_entry(golden)))
    records = [payloads.result(f"r{i}", i) for i in range(args.results)]
    telemetry = Telemetry(["type", "popularity", "dynamism", "region"], 50)
    try:  # the collector as the worker runs it once its tables are recovered
        from scorer.stream.collector import settle_after_recovery
    except ImportError:  # older checkouts: what their worker did
        import gc

        gc.freeze()
        gc.set_threshold(10_000, *gc.get_threshold()[1:])
    else:
        settle_after_recovery()
    # Older checkouts: the stages by the names they had then.
    observe = getattr(telemetry, "observe_metrics", telemetry.observe_scored)
    state: dict = {}

    def decode() -> list:
        return [events.decode_keyed(events.decode_result, k, v) for k, v in records]

    results = decode()

    def score() -> list:
        return [events.score_result(r, table[r.query_id], 10) for r in results]

    scored = score()

    def observe_all() -> None:
        for result, one in zip(results, scored, strict=True):
            observe(one.values, one.facets, result.top_confidence())

    def contribute() -> list:
        pending = run_state.PendingRollups()
        for i, (r, one) in enumerate(zip(results, scored, strict=True)):
            if stored is not None:
                row = stored.rollup_row(
                    stored.SourcePosition("results", i % 4, i), r.result_id, r.query_id,
                    list(one.values), one.facets, r.top_confidence(),
                )  # fmt: skip
                pending.add_row(r.run_id.encode(), row, 0.0)
            elif hasattr(pending, "add_row"):
                row = run_state.contribution_row(
                    "results", i % 4, i, 0, r.result_id, r.query_id,
                    list(one.values), one.facets, r.top_confidence(),
                )  # fmt: skip
                pending.add_row(r.run_id.encode(), row, 0.0)
            else:
                position = run_state.SourcePosition("results", i % 4, i)
                item = run_state.Contribution(
                    position, r.result_id, r.query_id, list(one.values), one.facets,
                    r.top_confidence(),
                )  # fmt: skip
                pending.add(r.run_id.encode(), item, 0.0)
        return pending.drain()

    drained = contribute()
    rows = (
        [
            (
                r.run_id.encode(),
                stored.rollup_row(
                    stored.SourcePosition("results", 0, i),
                    r.result_id,
                    r.query_id,
                    list(one.values),
                    one.facets,
                    r.top_confidence(),
                ),
            )
            for i, (r, one) in enumerate(zip(results, scored, strict=True))
        ]
        if stored is not None
        else []
    )

    marks = {"query_marks": False} if hasattr(run_state.RunBatch, "query_marks") else None

    def fold(options: dict | None = None) -> None:
        seen = SeenIndex()
        batch = run_state.RunBatch(
            state.get, {}.get, 10_000, seen.get, partition=0, now=1.0, **(options or {})
        )
        for _, key, value in drained:
            if stored is not None and hasattr(batch, "add_rows"):
                # A record's rows in one call, as the worker's fold handler folds them.
                batch.add_rows(key, stored.decode_rollup_record(value))
            elif stored is not None:
                for row in stored.decode_rollup_record(value):
                    batch.add_row(key, row)
            elif hasattr(batch, "add_row"):
                for row in orjson.loads(value):
                    batch.add_row(key, row)
            else:
                for item in run_state.decode_contributions(value):
                    batch.add(key, item)
        batch.finish("2026-01-01T00:00:00+00:00")

    stages: list[tuple[str, Callable[[], object]]] = [
        ("decode (validate, key check)", decode),
        ("score (metrics, scored payload)", score),
        ("telemetry (histograms, confidence)", observe_all),
        ("rollup contribution (queue, drain)", contribute),
        ("fold (run state, per-query, seen ids)", fold),
    ]
    extra: list[tuple[str, Callable[[], object]]] = []
    if marks is not None:  # what the per-query entries' marks cost
        extra.append(("fold, per-query marks off (SCORER_ROLLUP_QUERY_MARKS)", lambda: fold(marks)))
    handler = fold_handler(rows, args.commit_results) if stored is not None else None
    if handler is not None:  # the rollup topic's handler, its tables' changelog records too
        for name, overrides in HANDLER_MODES:
            row = f"fold handler and changelog records: {name}"
            extra.append((row, partial(handler, overrides)))
    print(f"code: {args.code or ROOT}; {args.results:,} results, best of {args.passes} passes")
    print("| stage | µs per result |\n|---|---:|")

    def best_of(stage: Callable[[], object]) -> float:
        best = float("inf")
        for _ in range(args.passes):
            started = time.perf_counter()
            stage()
            best = min(best, time.perf_counter() - started)
        return best

    total = 0.0
    for name, stage in stages:
        best = best_of(stage)
        total += best
        print(f"| {name} | {best / args.results * 1e6:.2f} |")
    print(f"| all five | {total / args.results * 1e6:.2f} |")
    for name, stage in extra:
        print(f"| {name} | {best_of(stage) / args.results * 1e6:.2f} |")


HANDLER_MODES: list[tuple[str, dict[str, bool]]] = [
    ("per-query entries in blocks (the default)", {}),
    ("a record per entry", {"rollup_entry_blocks": False}),
    (
        "a record per entry, written behind once per commit",
        {"rollup_entry_blocks": False, "rollup_write_behind": True},
    ),
]
"""How the fold handler's rows write their changelogs: Settings fields (a checkout
without one of them runs its own default for it)."""


def fold_handler(
    rows: list[tuple[bytes, tuple]], commit_results: int
) -> Callable[[dict[str, bool]], None] | None:
    """The rollup topic's handler (``RollupFold``) over Faust memory tables and their
    changelog writers, as the worker runs it (None: a checkout without it). The rows
    ``(run key, rollup row)`` go out as the results handler sends them, a record per run
    every 100 results; each run's records land in a rollup partition of their own and
    are fetched five at a time (500 results); an offset commit writes out what was
    written behind every ``commit_results`` results."""
    try:
        from scorer.stream.rollups import RollupFold
    except ImportError:
        return None
    import faust

    from scorer.settings import Settings
    from scorer.stream import stored
    from scorer.stream.faust_edge import ChangelogWriter
    from scorer.stream.telemetry import Telemetry

    app = faust.App("stages", broker="kafka://localhost:1", store="memory://")
    tables = {
        "rollups": app.Table("rollups", default=None, partitions=4, key_type=bytes),
        "queries": app.Table("run_queries", default=None, partitions=4),
        "seen": app.Table("rollup_seen", default=None, partitions=4, value_type=bytes),
    }
    runs = sorted({key for key, _ in rows})
    logs: list[list[SimpleNamespace]] = [[] for _ in runs]
    for start in range(0, len(rows), 100):
        for key, log in zip(runs, logs, strict=True):
            chunk = [row for run, row in rows[start : start + 100] if run == key]
            for value in stored.encode_rollup_records(chunk, key, None):
                log.append(SimpleNamespace(key=key, value=value, offset=len(log)))
    rounds = max(len(log) for log in logs)

    known = set(Settings.model_fields)

    def run(overrides: dict[str, bool]) -> None:
        for table in tables.values():
            table.data.data.clear()
        fields = {name: value for name, value in overrides.items() if name in known}
        settings = Settings(kafka_bootstrap_servers="stages:9092", **fields)
        writers = {name: ChangelogWriter(app, table, False) for name, table in tables.items()}
        fold = RollupFold(settings, Telemetry([], 1), clock=lambda: 1.0, **writers)
        for n, start in enumerate(range(0, rounds, 5)):
            for partition, log in enumerate(logs):
                batch = log[start : start + 5]
                if batch:
                    fold(SimpleNamespace(topic="rollup", partition=partition), batch)
            if (n + 1) * 500 % commit_results < 500:
                fold.write_out()
        fold.write_out()

    return run


if __name__ == "__main__":
    main()
