"""``scorer eval --html``: the evals page with the ``--format json`` document embedded."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
from click.testing import CliRunner

from scorer.cli import main
from scorer.page import DOCUMENT_ELEMENT_ID, page_html

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EMBEDDED = re.compile(
    rf'<script type="application/json" id="{DOCUMENT_ELEMENT_ID}">(.*?)</script>', re.S
)


def embedded_document(html: str) -> object:
    (found,) = EMBEDDED.findall(html)
    return orjson.loads(found)


def test_the_html_report_embeds_the_json_document_of_the_same_evaluation(tmp_path: Path):
    report = tmp_path / "report.html"
    runner = CliRunner()
    args = ["eval", str(EXAMPLES / "golden.jsonl"), str(EXAMPLES / "results.jsonl")]
    as_json = runner.invoke(main, [*args, "--format", "json"])
    with_html = runner.invoke(main, [*args, "--html", str(report)])
    assert as_json.exit_code == 0 and with_html.exit_code == 0, with_html.output
    document = embedded_document(report.read_text())
    assert document == orjson.loads(as_json.stdout)
    assert set(document["runs"]) == {"bm25-v1", "hybrid-v2"}
    assert document["runs"]["hybrid-v2"]["metrics"]["ndcgAt10"] > 0
    assert "bm25-v1" in with_html.stdout  # the table still goes to stdout


def test_the_report_is_self_contained_and_reads_no_api_when_a_document_is_embedded():
    html = page_html({"k": 10, "runs": {}})
    assert "<script src" not in html and 'rel="stylesheet"' not in html
    without_svg_namespace = html.replace('"http://www.w3.org/2000/svg"', "")
    assert "http://" not in without_svg_namespace and "https://" not in html
    assert "offlineSource(JSON.parse(offline))" in html
    assert embedded_document(html) == {"k": 10, "runs": {}}


def test_no_string_of_the_document_can_close_the_script_element():
    html = page_html({"runs": {"</script><b>x": {"count": 1}}})
    assert embedded_document(html) == {"runs": {"</script><b>x": {"count": 1}}}
    assert "</script><b>" not in html


def test_the_served_page_embeds_no_document():
    assert EMBEDDED.findall(page_html()) == [""]


def test_an_unwritable_report_path_exits_2_with_one_line(tmp_path: Path):
    result = CliRunner().invoke(
        main,
        [
            "eval",
            str(EXAMPLES / "golden.jsonl"),
            str(EXAMPLES / "results.jsonl"),
            "--html",
            str(tmp_path / "missing-folder" / "report.html"),
        ],
    )
    assert result.exit_code == 2
    assert "cannot write the HTML report" in result.stderr
