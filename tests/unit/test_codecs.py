"""Every codec Kafka clients use decodes in a plain install (DESIGN.md, "Any producer")."""

from __future__ import annotations

from importlib.metadata import requires

import pytest
from aiokafka import codec
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from packaging.requirements import Requirement

from scorer.stream.faust_edge.versions import (
    CODECS,
    MissingCodec,
    VersionMismatch,
    available_codecs,
    check_codecs,
)

CODEC_IDS = {
    "gzip": DefaultRecordBatch.CODEC_GZIP,
    "snappy": DefaultRecordBatch.CODEC_SNAPPY,
    "lz4": DefaultRecordBatch.CODEC_LZ4,
    "zstd": DefaultRecordBatch.CODEC_ZSTD,
}


def runtime_requirements() -> list[Requirement]:
    """The installed distribution's requirements that no extra (``dev``) adds."""
    parsed = [Requirement(line) for line in requires("retrieval-scorer") or []]
    return [req for req in parsed if req.marker is None or "extra" not in str(req.marker)]


def test_cramjam_is_a_runtime_requirement_not_only_a_dev_one() -> None:
    names = {req.name for req in runtime_requirements()}
    assert "cramjam" in names
    assert "aiokafka" in names  # the parse found the runtime list, not an empty one


@pytest.mark.parametrize("name", ["snappy", "lz4", "zstd"])
def test_aiokafka_finds_the_codec_library(name: str) -> None:
    assert getattr(codec, f"has_{name}")() is True
    assert available_codecs()[name] is True


@pytest.mark.parametrize("name", sorted(CODEC_IDS))
def test_a_compressed_batch_round_trips(name: str) -> None:
    """A batch built with the codec is compressed (smaller than its records) and reads
    back record for record, as the worker's consumer reads a producer's batch."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=CODEC_IDS[name],
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    ranked = b'"d", ' * 500 + b'"e"'
    values = [b'{"resultId": "r%d", "ranked": [%s]}' % (i, ranked) for i in range(3)]
    for offset, value in enumerate(values):
        builder.append(offset, timestamp=None, key=b"q1", value=value, headers=[("h", b"v")])
    raw = bytes(builder.build())
    assert len(raw) < sum(len(value) for value in values)

    batch = DefaultRecordBatch(raw)
    assert batch.compression_type == CODEC_IDS[name]
    records = list(batch)
    assert [record.value for record in records] == values
    assert [record.key for record in records] == [b"q1"] * 3
    assert [record.offset for record in records] == [0, 1, 2]
    assert [list(record.headers) for record in records] == [[("h", b"v")]] * 3


@pytest.mark.parametrize(
    ("encode", "decode"),
    [
        (codec.gzip_encode, codec.gzip_decode),
        (codec.snappy_encode, codec.snappy_decode),
        (codec.lz4_encode, codec.lz4_decode),
        (codec.zstd_encode, codec.zstd_decode),
    ],
)
def test_the_codec_functions_round_trip(encode: object, decode: object) -> None:
    payload = b"retrieval " * 10_000
    compressed = encode(payload)  # type: ignore[operator]
    assert len(compressed) < len(payload)
    assert decode(compressed) == payload  # type: ignore[operator]


def test_a_missing_codec_library_stops_the_worker_with_one_line() -> None:
    with pytest.raises(MissingCodec) as raised:
        check_codecs({"snappy": True, "lz4": False, "zstd": False})
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("aiokafka cannot decode lz4/zstd batches: install cramjam")
    # The worker command reports a VersionMismatch as its one-line error.
    assert isinstance(raised.value, VersionMismatch)


def test_the_installed_codecs_pass_the_start_check() -> None:
    assert set(CODECS) == {"snappy", "lz4", "zstd"}
    check_codecs()
