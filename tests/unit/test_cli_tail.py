"""``scorer tail``'s filters and dead-letter fields, without a broker."""

from __future__ import annotations

from click.testing import CliRunner

from scorer.cli import main
from scorer.cli.tail_cmd import EventFilter, deadletter_fields


def test_a_facet_that_is_not_key_value_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["tail", "--facet", "factoid"])
    assert result.exit_code == 2
    assert "'factoid' is not key=value (e.g. --facet type=factoid)" in result.stderr


def test_the_filter_needs_one_of_the_runs_and_every_facet() -> None:
    only = EventFilter(frozenset({"a", "b"}), (("type", "list"), ("popularity", "head")))
    event = {"runId": "a", "facets": {"type": "list", "popularity": "head", "dynamism": "static"}}
    assert only.admits(event)
    assert not only.admits({**event, "runId": "c"})
    assert not only.admits({**event, "facets": {"type": "list"}})
    assert EventFilter().admits({"runId": "z"})


def test_dead_letter_headers_become_camel_case_fields_and_others_are_left_out() -> None:
    headers = [("traceparent", b"00-1"), ("x-scorer-error-class", b"invalid-json")]
    assert deadletter_fields(headers) == {"errorClass": "invalid-json"}


def test_a_dead_letter_that_is_not_utf8_keeps_its_bytes_in_json() -> None:
    import base64

    import orjson

    from scorer.cli.tail_cmd import deadletter_json

    raw = b"\x00\xff not json"
    document = orjson.loads(deadletter_json([("x-scorer-error-class", b"InvalidJson")], raw))
    assert document["value"] is None
    assert base64.b64decode(document["valueBase64"]) == raw
    text = orjson.loads(deadletter_json([], b'{"resultId": 7}'))
    assert text["value"] == '{"resultId": 7}' and "valueBase64" not in text
