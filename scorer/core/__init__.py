"""The metric core: the measure registry (``measures``), the fused one-pass kernel
that scores one ranking (``metrics``), the mean fold with its intervals
(``rollup``) and the distributions they use (``stats``).

Pure Python, imports nothing of the scorer outside this package; the offline
evaluation, the analysis and the stream all score through it.
"""
