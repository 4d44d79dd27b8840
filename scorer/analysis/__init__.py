"""Reading scores against each other: paired comparison of two runs (``compare``),
anytime-valid confidence sequences (``anytime``), significance tests across
runs (``significance``), risk–coverage curves (``risk_coverage``) and their
mergeable streaming sketch (``risk_sketch``).

Built on :mod:`scorer.core`; shared by the offline evaluation and the live worker.
"""
