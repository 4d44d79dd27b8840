"""Helpers shared by the test suites (brokers, unique names, settings)."""
