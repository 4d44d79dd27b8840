"""Configuration from the environment (prefix ``SCORER_``), validated at start.

``KAFKA_BOOTSTRAP_SERVERS`` is honoured as the standard name of the broker
address; without it the address the local broker (``scorer kafka up``) wrote
into the state directory is used, then ``localhost:9092``.
"""

from __future__ import annotations

import difflib
import math
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AliasChoices,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

CONFIDENCE_EDGES = tuple(round(0.05 * step, 2) for step in range(1, 21))
"""Default upper edges of the confidence buckets of the rolling AURC in Prometheus:
0.05 to 1.0 (then +Inf), for a confidence that is a probability or a cosine; other
scales set ``SCORER_RISK_CONFIDENCE_EDGES``."""

GC_THRESHOLDS = (50_000, 20, 100)
"""Default of ``gc_thresholds``: ``gc.set_threshold``'s three while the tables are
recovered and after (``scorer.stream.collector``)."""

FAUST_COMMIT_EVERY = 10_000
"""Faust's ``broker_commit_every``: the at-least-once default of ``commit_every_records``."""
PARKED_RECORD_MARGIN = 16_384
"""Bytes of a parked-table changelog record besides its value (the parked list): the
key (a queryId, at most 256 characters, 1 KiB in UTF-8), the record and batch overhead
aiokafka counts (82 bytes), and room for headers."""

DEFAULT_STATE_DIR = Path(".scorer")
BOOTSTRAP_FILE = Path("kafka") / "bootstrap"


def local_bootstrap(state_dir: Path) -> str | None:
    """The address written by ``scorer kafka up`` into ``state_dir``, if any."""
    path = state_dir / BOOTSTRAP_FILE
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return text or None


class Settings(BaseSettings):
    """Every knob of the scorer. Frozen: read once at start."""

    model_config = SettingsConfigDict(env_prefix="SCORER_", frozen=True, extra="forbid")

    state_dir: Path = Field(
        DEFAULT_STATE_DIR, description="Local broker state and default datadir."
    )
    kafka_bootstrap_servers: str = Field(
        "",
        validation_alias=AliasChoices("KAFKA_BOOTSTRAP_SERVERS", "SCORER_KAFKA_BOOTSTRAP_SERVERS"),
    )
    kafka_security_protocol: Literal["PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL"] = "PLAINTEXT"
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "SCRAM-SHA-256"
    kafka_sasl_username: str | None = None
    kafka_sasl_password: SecretStr | None = None
    kafka_ssl_cafile: Path | None = None
    kafka_ssl_certfile: Path | None = None
    kafka_ssl_keyfile: Path | None = None

    app_id: str = Field("retrieval-scorer", min_length=1, max_length=100)
    results_topic: str = "retrieval.results"
    qrels_topic: str = "retrieval.qrels"
    scored_topic: str = "retrieval.scored"
    deadletter_topic: str = "retrieval.deadletter"
    rollup_topic: str = "retrieval.scored.by-run"
    partitions: int = Field(4, ge=1, le=1024)
    replication_factor: int = Field(1, ge=1, le=16)

    default_retrieval_k: int = Field(10, ge=1, le=1000)
    store: str = "memory://"
    processing_guarantee: Literal["at_least_once", "exactly_once"] = "at_least_once"
    broker_session_timeout: float = Field(
        60.0,
        ge=6.0,
        le=300.0,
        description=(
            "Seconds without a heartbeat before the broker declares a worker dead and hands "
            "its partitions to the others (the broker's group.min.session.timeout.ms is 6 s)."
        ),
    )
    stop_timeout_seconds: float = Field(
        20.0,
        ge=1.0,
        le=600.0,
        description=(
            "Longest a graceful stop (SIGTERM, SIGINT) may take: past it the worker exits "
            "with code 1 without committing (the next owner redoes that work). Set the "
            "orchestrator's grace period above it (docs/operations.md)."
        ),
    )
    web_host: str = "127.0.0.1"
    web_port: int = Field(6066, ge=1, le=65535)
    web_advertised_host: str | None = Field(
        None, description="Host other workers use to reach this one (default: web_host)."
    )
    datadir: Path | None = None

    parking_ttl_seconds: float = Field(300.0, gt=0)
    parking_max_per_query: int = Field(100, ge=1)
    parking_max_bytes_per_query: int = Field(
        900_000,
        ge=1024,
        description=(
            "The most bytes of results parked for one query (its parked list, as its "
            "changelog record carries it): the oldest are evicted first, as unjudged; a "
            "result larger than this alone is never parked. At most "
            "SCORER_PRODUCER_MAX_REQUEST_SIZE - 16384, so the record always fits."
        ),
    )
    parking_max_total: int = Field(100_000, ge=1)

    rollup_max_queries: int = Field(10_000, ge=0, description="Per-run queries kept for pairing.")
    rollup_query_marks: bool = Field(
        True,
        description=(
            "Per-query entries carry the positions folded into them, so that a crash "
            "between a fold's table writes leaves no query counted twice or missed "
            "(at-least-once). Set false while rolling over from a version without them."
        ),
    )
    rollup_write_behind: bool = Field(
        False,
        description=(
            "Under at_least_once with a memory store and query marks: the run states' and "
            "per-query entries' changelog records are written once per offset commit (the "
            "newest value of each key changed since the last one), not once per folded "
            "batch; a crash before the commit loses them with the offsets, and the "
            "redelivered batches fold them again. Fewer changelog records when queries "
            "recur within a commit interval; a burst of records at each commit, which "
            "raises the latency tail (docs/benchmarks.md). Off: written with every batch."
        ),
    )
    rollup_entry_blocks: bool = Field(
        True,
        description=(
            "Under at_least_once with a memory store and query marks: the per-query "
            "entries a folded batch changed go to their changelog as one record (a "
            "block), not one record each; superseded blocks are deleted once what "
            "replaced them is acknowledged. Off: one record per entry and batch "
            "(always so under exactly_once or with a RocksDB store)."
        ),
    )
    run_history_seconds: float = Field(
        300.0, gt=0, le=86_400, description="Width of a run's trend buckets (the run list's line)."
    )
    run_history_buckets: int = Field(
        48, ge=1, le=1000, description="Trend buckets a run keeps (48 x 300 s: four hours)."
    )
    watch_pairs: tuple[tuple[str, str], ...] = Field(
        (),
        description="Run pairs [baseline, candidate] whose anytime-valid comparison is "
        "exported to /metrics (scorer_watch_*) for alerting, as a JSON list of pairs.",
    )
    watch_seconds: float = Field(
        5.0, gt=0, le=3600, description="How often watched pairs are read."
    )
    compare_alpha: float = Field(
        0.05,
        gt=0,
        lt=1,
        description="Error rate of the anytime-valid comparisons (anytime95 at 1 - alpha; "
        "the watched pairs' verdicts): the chance that a comparison of two runs that do "
        "not differ is ever called different, however often it is read.",
    )
    rollup_batch_size: int = Field(
        500, ge=1, le=100_000, description="Scored records folded into run rollups per batch."
    )
    rollup_batch_seconds: float = Field(
        0.2, gt=0, le=60, description="Longest wait for a rollup batch to fill."
    )
    # Longer than a producer's delivery timeout (Kafka's default: 120 s), so its
    # retries are caught; memory is about rate x window entries.
    rollup_dedupe_seconds: float = Field(
        300.0,
        ge=0,
        le=7 * 86_400,
        description=(
            "How long a run remembers the resultIds it counted, so that a result its "
            "producer sent twice is counted once; 0 turns the check off."
        ),
    )
    commit_interval_seconds: float | None = Field(
        None,
        gt=0,
        le=60,
        description=(
            "Seconds between offset commits; default 2.8 under at_least_once (Faust's) and "
            "0.5 under exactly_once, where a read_committed consumer sees a result only once "
            "its transaction commits, so this is the floor of its latency."
        ),
    )
    commit_every_records: int | None = Field(
        None,
        ge=0,
        le=100_000_000,
        description=(
            "Offsets are also committed after this many input records (Faust's "
            "broker_commit_every). Default: 10,000 under at_least_once (Faust's), none "
            "under exactly_once, where every commit holds the batches back while its "
            "transactions end and Faust's count added a commit every 0.4 s at 25,000 "
            "results/s to the interval's two a second. 0: on the interval only."
        ),
    )
    caught_up_commit_seconds: float = Field(
        0.02,
        ge=0,
        le=60,
        description=(
            "Under exactly_once, a worker that has read its results to their end "
            "commits each batch at once, at most this often, instead of waiting for the "
            "commit interval: the latency a read_committed reader sees without a "
            "backlog. 0: commit on the interval only."
        ),
    )
    caught_up_lag_records: int = Field(
        500,
        ge=0,
        le=1_000_000,
        description=(
            "Under exactly_once, how far (in records) each input partition may be from its "
            "end, as of its last fetch, for the worker to count as caught up and commit "
            "at once (caught_up_commit_seconds): under a steady load the next fetch has "
            "usually moved the end on already. 0: only at the very end."
        ),
    )
    kafka_fetch_max_wait_ms: int = Field(
        100,
        ge=1,
        le=10_000,
        description="How long the broker may hold a fetch for data. Faust hardcodes 1500 ms, "
        "which stalls busy partitions behind fetches of idle ones (docs/benchmarks.md).",
    )
    batch_max_records: int = Field(
        500,
        ge=1,
        le=100_000,
        description="The most results handed to scoring at once: a larger fetched batch is "
        "scored in parts, taken in turn across partitions, each part's scored events sent "
        "before the next is scored (latency under load; docs/benchmarks.md).",
    )
    gc_thresholds: tuple[
        Annotated[int, Field(ge=1)], Annotated[int, Field(ge=1)], Annotated[int, Field(ge=1)]
    ] = Field(
        GC_THRESHOLDS,
        description="The garbage collector's three thresholds (gc.set_threshold) while the "
        "tables are recovered and after, as a JSON array (docs/operations.md).",
    )
    producer_linger_seconds: float = Field(
        0.0,
        ge=0,
        le=1,
        description=(
            "Producer linger: holds sends up to this long to batch them into fewer requests "
            "(adds up to this much latency). The worker sends a fetched batch's records "
            "together, so they share requests without it (docs/benchmarks.md)."
        ),
    )

    producer_max_request_size: int = Field(
        1_048_588,
        ge=65_536,
        description=(
            "The largest record (bytes, as aiokafka counts it) the worker's producer sends; "
            "the default is the broker's default message.max.bytes. Keep it at most the "
            "max.message.bytes of the topics the worker writes. A dead letter that would "
            "be larger is truncated, with headers saying so (docs/operations.md)."
        ),
    )

    facet_allowlist: tuple[str, ...] = ("type", "popularity", "dynamism")
    facet_max_values: int = Field(20, ge=1, le=1000)
    risk_confidence_edges: tuple[float, ...] = Field(
        CONFIDENCE_EDGES,
        min_length=1,
        max_length=100,
        description=(
            "Upper edges of the confidence buckets of the scorer_confidence_* counters "
            "(the rolling AURC in Prometheus), ascending; a JSON list in the environment."
        ),
    )

    @field_validator("risk_confidence_edges")
    @classmethod
    def _ascending_edges(cls, edges: tuple[float, ...]) -> tuple[float, ...]:
        if any(not math.isfinite(edge) for edge in edges) or list(edges) != sorted(set(edges)):
            raise ValueError(
                f"risk_confidence_edges must be finite and strictly ascending, got {list(edges)}"
            )
        return edges

    @field_validator("store")
    @classmethod
    def _known_store(cls, value: str) -> str:
        if not (value.startswith("memory://") or value.startswith("rocksdb://")):
            raise ValueError(f"store must be memory:// or rocksdb://, got {value!r}")
        return value

    @model_validator(mode="after")
    def _parked_list_fits_a_record(self) -> Settings:
        room = self.producer_max_request_size - PARKED_RECORD_MARGIN
        if self.parking_max_bytes_per_query > room:
            raise ValueError(
                f"parking_max_bytes_per_query {self.parking_max_bytes_per_query} must be at "
                f"most producer_max_request_size - {PARKED_RECORD_MARGIN} = {room}, or a "
                "query's parked list would not fit its changelog record"
            )
        return self

    @model_validator(mode="after")
    def _sasl_needs_credentials(self) -> Settings:
        if self.kafka_security_protocol.startswith("SASL") and not (
            self.kafka_sasl_username and self.kafka_sasl_password
        ):
            raise ValueError(
                f"{self.kafka_security_protocol} needs SCORER_KAFKA_SASL_USERNAME and "
                "SCORER_KAFKA_SASL_PASSWORD"
            )
        return self

    @property
    def bootstrap_servers(self) -> str:
        """The broker address: the environment, else the local broker's, else localhost."""
        return self.kafka_bootstrap_servers or local_bootstrap(self.state_dir) or "localhost:9092"

    @property
    def canonical_url(self) -> str:
        """The URL other workers forward run API requests to."""
        host = self.web_advertised_host or self.web_host
        if host in ("0.0.0.0", "::"):
            host = socket.gethostname()
        return f"http://{host}:{self.web_port}"

    @property
    def data_dir(self) -> Path:
        return self.datadir or self.state_dir / "data"

    def commit_interval(self) -> float:
        """``commit_interval_seconds``, or the default of the processing guarantee."""
        if self.commit_interval_seconds is not None:
            return self.commit_interval_seconds
        return 0.5 if self.processing_guarantee == "exactly_once" else 2.8

    def commit_every(self) -> int | None:
        """``commit_every_records``, or the default of the processing guarantee; None:
        no commit by count."""
        every = self.commit_every_records
        if every is None:
            every = 0 if self.processing_guarantee == "exactly_once" else FAUST_COMMIT_EVERY
        return every or None

    def aiokafka_options(self) -> dict[str, object]:
        """Connection keyword arguments for aiokafka clients (security included)."""
        options: dict[str, object] = {
            "bootstrap_servers": self.bootstrap_servers,
            "security_protocol": self.kafka_security_protocol,
        }
        if self.kafka_security_protocol.startswith("SASL"):
            assert self.kafka_sasl_password is not None
            options.update(
                sasl_mechanism=self.kafka_sasl_mechanism,
                sasl_plain_username=self.kafka_sasl_username,
                sasl_plain_password=self.kafka_sasl_password.get_secret_value(),
            )
        if self.kafka_security_protocol.endswith("SSL"):
            from aiokafka.helpers import create_ssl_context

            options["ssl_context"] = create_ssl_context(
                cafile=self.kafka_ssl_cafile,
                certfile=self.kafka_ssl_certfile,
                keyfile=self.kafka_ssl_keyfile,
            )
        return options


class ConfigError(ValueError):
    """The environment holds a setting the scorer cannot run with (one line)."""


NOT_SETTINGS = frozenset({"SCORER_IMAGE_TAG", "SCORER_WEB_HOST_PORT", "SCORER_PLOT_PNG"})
"""``SCORER_*`` variables read by other tools (docker-compose.yml, a test's plot)."""


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """``SCORER_*`` variables in ``environ`` that name no setting (a typo is not ignored)."""
    known = {f"SCORER_{name.upper()}" for name in Settings.model_fields} | NOT_SETTINGS
    return sorted(name for name in environ if name.startswith("SCORER_") and name not in known)


def load_settings() -> Settings:
    """Settings from the environment, or :class:`ConfigError` naming the bad variable."""
    unknown = unknown_variables(os.environ)
    if unknown:
        known = [f"SCORER_{name.upper()}" for name in Settings.model_fields]
        close = difflib.get_close_matches(unknown[0], known, n=1)
        hint = f" (did you mean {close[0]}?)" if close else " (see scorer/settings.py)"
        raise ConfigError(f"unknown setting {unknown[0]}{hint}")
    try:
        return Settings()
    except ValidationError as error:
        first = error.errors()[0]
        location = first["loc"]
        where = "SCORER_" + "_".join(str(p) for p in location).upper() if location else "settings"
        if location == ("KAFKA_BOOTSTRAP_SERVERS",):
            where = "KAFKA_BOOTSTRAP_SERVERS"
        message = first["msg"].removeprefix("Value error, ")
        raise ConfigError(f"bad configuration {where}: {message}") from None
