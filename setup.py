"""The compiled scoring kernel; everything else is in pyproject.toml.

The extension is optional: without a C compiler the install goes on and
``scorer.core.metrics`` scores in Python (the same numbers, slower).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "scorer.core._kernel",
            ["scorer/core/_kernel.c"],
            # No fused multiply-add: each DCG term must round as Python's does.
            extra_compile_args=["-O2", "-ffp-contract=off"],
            optional=True,
        )
    ]
)
