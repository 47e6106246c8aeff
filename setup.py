"""The compiled BM25 kernel; everything else about the package is in pyproject.toml.

The extension is optional (adr/0047-compiled-lexical-kernel.md): without a C compiler
the install goes on and searches use the numpy path, which returns the same results
more slowly. ``-ffp-contract=off`` keeps every score bit-exact (no fused multiply-add).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "groundkit.lexical._kernel",
            sources=["src/groundkit/lexical/_kernel.c"],
            extra_compile_args=["-O3", "-ffp-contract=off"],
            optional=True,
        )
    ]
)
