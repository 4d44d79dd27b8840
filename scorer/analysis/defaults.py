"""The defaults of the run comparisons (:mod:`scorer.analysis.significance`), in a
module that imports nothing: ``scorer eval`` declares its options with them
before it knows whether it will compare anything."""

DEFAULT_PERMUTATIONS = 10_000
"""Permutations of the paired randomization test."""

DEFAULT_SEED = 20_241_130
"""Seed of the randomization test's sign flips."""

DEFAULT_ALPHA = 0.05
"""Significance level, Holm-corrected over the comparisons with the baseline."""
