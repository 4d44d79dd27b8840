"""The ``scorer`` click group. Each subcommand lives in a module of its own and is
imported only when it runs, so ``scorer eval`` never pays for Faust."""

from __future__ import annotations

import importlib

import click

from scorer import __version__

# name -> (module, attribute) of each subcommand.
_COMMANDS: dict[str, tuple[str, str]] = {
    "eval": ("scorer.cli.eval_cmd", "eval_command"),
    "schemas": ("scorer.cli.schemas_cmd", "schemas_group"),
    "kafka": ("scorer.cli.kafka_cmd", "kafka_group"),
    "topics": ("scorer.cli.topics_cmd", "topics_group"),
    "worker": ("scorer.cli.worker_cmd", "worker_command"),
    "replay": ("scorer.cli.replay_cmd", "replay_command"),
    "demo": ("scorer.cli.demo_cmd", "demo_command"),
    "tail": ("scorer.cli.tail_cmd", "tail_command"),
    "export": ("scorer.cli.export_cmd", "export_command"),
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attribute = target
        return getattr(importlib.import_module(module_name), attribute)


@click.group(cls=LazyGroup)
@click.version_option(__version__, prog_name="scorer")
def main() -> None:
    """Score retrieval quality: offline from run files, or live from Kafka."""
