"""Streaming scorer for retrieval quality.

Layers, each knowing only those below it: ``schemas`` (wire contract),
``scorer.metrics`` (pure metric functions), ``scorer.rollup`` (aggregation),
``scorer.io`` (offline readers), ``scorer.kafka`` (local broker, admin),
``scorer.stream`` (the Faust worker), ``scorer.cli`` (entry points).
"""

__version__ = "0.1.0"
