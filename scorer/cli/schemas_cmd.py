"""``scorer schemas export|check``: the JSON Schema files of the wire models.

One file per model in :data:`schemas.WIRE_MODELS`, ``schemas/<Name>.schema.json``,
generated from the pydantic models (camelCase aliases). Events the scorer
consumes are described as it validates them; events it produces as it
serializes them. A unit test keeps the committed files in sync.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Literal

import click

import schemas
from schemas import WIRE_MODELS, GoldenQuery, RetrievalResult, WireModel

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_DIR = Path(schemas.__file__).parent
"""Where the files are committed: beside the models."""

_CONSUMED: tuple[type[WireModel], ...] = (RetrievalResult, GoldenQuery)
"""Models the scorer reads (validation schema); the others it writes (serialization)."""


def schema_mode(model: type[WireModel]) -> Literal["validation", "serialization"]:
    """How ``model`` is described: as the scorer validates it, or as it writes it."""
    return "validation" if model in _CONSUMED else "serialization"


def schema_files() -> dict[str, str]:
    """``{file name: text}`` of every wire model's JSON Schema: pretty, stable (property
    order follows the model), with a trailing newline."""
    files: dict[str, str] = {}
    for model in WIRE_MODELS:
        document = {
            "$schema": JSON_SCHEMA_DIALECT,
            **model.model_json_schema(by_alias=True, mode=schema_mode(model)),
        }
        files[f"{model.__name__}.schema.json"] = (
            json.dumps(document, indent=2, ensure_ascii=False) + "\n"
        )
    return files


@click.group("schemas")
def schemas_group() -> None:
    """JSON Schema files of the events on the wire."""


@click.command("export")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=SCHEMA_DIR,
    show_default=True,
    help="Directory to write <Name>.schema.json into.",
)
def export_command(out_dir: Path) -> None:
    """Write the JSON Schema of every wire model to OUT/<Name>.schema.json."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in schema_files().items():
        (out_dir / name).write_text(text, encoding="utf-8")
        click.echo(out_dir / name)


@click.command("check")
@click.option(
    "--dir",
    "schema_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=SCHEMA_DIR,
    show_default=True,
    help="Directory holding the committed schema files.",
)
def check_command(schema_dir: Path) -> None:
    """Exit 1 if a schema file is missing or differs from the models."""
    stale = [
        name
        for name, text in schema_files().items()
        if not (schema_dir / name).is_file()
        or (schema_dir / name).read_text(encoding="utf-8") != text
    ]
    if stale:
        click.echo(
            f"out of date in {schema_dir}: {', '.join(stale)}; run `scorer schemas export`",
            err=True,
        )
        sys.exit(1)
    click.echo(f"{len(WIRE_MODELS)} schema files in {schema_dir} match the models")


schemas_group.add_command(export_command)
schemas_group.add_command(check_command)
