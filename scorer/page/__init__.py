"""The evals page: one self-contained HTML document (its style and script inlined).

Served by the worker at ``/`` (and ``/evals``), where the script reads the run API;
written by ``scorer eval --html``, where it reads the ``scorer eval --format json``
document embedded in the file instead. Plain HTML, CSS and JavaScript drawing inline
SVG, shipped as package data: nothing is fetched from the network but the API.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from typing import Any

import orjson

from scorer.core.measures import HEADLINE, MEASURES

DOCUMENT_ELEMENT_ID = "evals-document"


def _part(name: str) -> str:
    return files(__package__).joinpath(name).read_text(encoding="utf-8")


def measure_columns() -> dict[str, list[list[str]]]:
    """The page's columns from the registry: ``[wire name, label]`` of every measure
    (``METRICS``) and of the run list's headline ones (``HEADLINE``)."""
    return {
        "METRICS": [[m.wire, m.label] for m in MEASURES],
        "HEADLINE": [[m.wire, m.label] for m in HEADLINE],
    }


@cache
def _template() -> str:
    script = _part("evals.js").replace(
        "/*EVALS-MEASURES*/", orjson.dumps(measure_columns()).decode()
    )
    return (
        _part("index.html")
        .replace("/*EVALS-STYLE*/", _part("evals.css"))
        .replace("/*EVALS-SCRIPT*/", script)
    )


def page_html(document: Any = None) -> str:
    """The page; with ``document`` (a ``scorer eval --format json`` document) it shows
    that document offline instead of asking the run API."""
    embedded = ""
    if document is not None:
        # "<" escaped so that no string of the document can close the script element.
        embedded = orjson.dumps(document).decode().replace("<", "\\u003c")
    element = f'<script type="application/json" id="{DOCUMENT_ELEMENT_ID}">{embedded}</script>'
    return _template().replace("<!--EVALS-DOCUMENT-->", element)
