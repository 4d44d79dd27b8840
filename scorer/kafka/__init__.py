"""Kafka at the edge of the scorer: the local broker launcher, topic
administration, the probe, a plain producer and the demo's sample traffic
(``demo``).

Nothing here imports Faust; it is usable from the CLI, the demo and the tests.
"""
