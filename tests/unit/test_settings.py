"""Configuration: defaults, the local broker's address, and one-line errors."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from scorer.cli import main
from scorer.settings import ConfigError, Settings, load_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    for name in ("KAFKA_BOOTSTRAP_SERVERS", "SCORER_KAFKA_BOOTSTRAP_SERVERS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SCORER_STATE_DIR", str(tmp_path))


def test_defaults_name_the_documented_topics():
    settings = Settings()
    assert settings.results_topic == "retrieval.results"
    assert settings.qrels_topic == "retrieval.qrels"
    assert (settings.scored_topic, settings.deadletter_topic) == (
        "retrieval.scored",
        "retrieval.deadletter",
    )
    assert settings.default_retrieval_k == 10
    assert settings.store == "memory://"


def test_the_local_broker_address_is_used_when_no_broker_is_configured(tmp_path, monkeypatch):
    assert Settings().bootstrap_servers == "localhost:9092"
    (tmp_path / "kafka").mkdir()
    (tmp_path / "kafka" / "bootstrap").write_text("127.0.0.1:40001\n")
    assert Settings().bootstrap_servers == "127.0.0.1:40001"
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "broker:9092")
    assert Settings().bootstrap_servers == "broker:9092"


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("SCORER_PARTITIONS", "0", "bad configuration SCORER_PARTITIONS: Input should be greater"),
        ("SCORER_STORE", "redis://", "bad configuration SCORER_STORE: store must be memory://"),
        ("SCORER_WEB_PORT", "http", "bad configuration SCORER_WEB_PORT: Input should be a valid"),
        ("SCORER_KAFKA_SECURITY_PROTOCOL", "SASL_SSL", "SASL_SSL needs SCORER_KAFKA_SASL_USERNAME"),
    ],
)
def test_bad_configuration_fails_at_start_with_one_line(monkeypatch, variable, value, message):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert message in str(caught.value)
    result = CliRunner().invoke(main, ["worker"])
    assert result.exit_code == 1
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_the_sasl_password_never_shows_in_repr(monkeypatch):
    monkeypatch.setenv("SCORER_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("SCORER_KAFKA_SASL_USERNAME", "scorer")
    monkeypatch.setenv("SCORER_KAFKA_SASL_PASSWORD", "hunter2-secret")
    settings = load_settings()
    assert "hunter2-secret" not in repr(settings)
    assert settings.aiokafka_options()["sasl_plain_password"] == "hunter2-secret"


def test_the_commit_interval_defaults_to_the_processing_guarantee_and_can_be_set() -> None:
    assert Settings().commit_interval() == 2.8
    assert Settings(processing_guarantee="exactly_once").commit_interval() == 0.5
    assert Settings(commit_interval_seconds=1.5).commit_interval() == 1.5


def test_the_commit_by_count_defaults_to_the_processing_guarantee_and_can_be_set() -> None:
    # Faust's 10,000 under at-least-once; none under exactly_once, where every commit
    # holds the batches back while its transactions end (docs/benchmarks.md).
    assert Settings().commit_every() == 10_000
    assert Settings(processing_guarantee="exactly_once").commit_every() is None
    assert Settings(processing_guarantee="exactly_once", commit_every_records=5).commit_every() == 5
    assert Settings(commit_every_records=0).commit_every() is None
    with pytest.raises(ValueError, match="commit_every_records"):
        Settings(commit_every_records=-1)


def test_a_setting_name_that_does_not_exist_fails() -> None:
    with pytest.raises(ValueError, match="bootstrap_servers"):
        Settings(bootstrap_servers="broker:9092")  # the real name: KAFKA_BOOTSTRAP_SERVERS


def test_an_unknown_scorer_variable_stops_the_worker_with_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SCORER_PARTITONS", "8")
    with pytest.raises(ConfigError) as raised:
        load_settings()
    assert str(raised.value) == (
        "unknown setting SCORER_PARTITONS (did you mean SCORER_PARTITIONS?)"
    )
    result = CliRunner().invoke(main, ["worker"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "Error: unknown setting SCORER_PARTITONS (did you mean SCORER_PARTITIONS?)"
    ]


def test_size_limits_default_to_the_brokers_message_size_with_parking_below(monkeypatch):
    settings = Settings()
    assert settings.producer_max_request_size == 1_048_588
    assert settings.parking_max_bytes_per_query == 900_000
    monkeypatch.setenv("SCORER_PRODUCER_MAX_REQUEST_SIZE", "2000000")
    monkeypatch.setenv("SCORER_PARKING_MAX_BYTES_PER_QUERY", "1983616")  # 2,000,000 - 16,384
    settings = load_settings()
    assert (settings.producer_max_request_size, settings.parking_max_bytes_per_query) == (
        2_000_000,
        1_983_616,
    )


def test_a_parking_bound_that_would_not_fit_a_record_fails_with_one_line(monkeypatch):
    monkeypatch.setenv("SCORER_PRODUCER_MAX_REQUEST_SIZE", "500000")
    with pytest.raises(ConfigError) as raised:
        load_settings()
    message = str(raised.value)
    assert "\n" not in message
    assert "parking_max_bytes_per_query 900000 must be at most" in message
    assert "= 483616" in message
