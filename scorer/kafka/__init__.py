"""Kafka at the edge of the scorer: the local broker launcher and topic administration.

Neither module imports Faust; both are usable from the CLI, the demo and the tests.
"""
