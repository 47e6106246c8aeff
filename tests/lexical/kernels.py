"""Running a lexical test on the compiled kernel and on the numpy path."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

import pytest

from groundkit.lexical import bm25

# Set by the CI job that installs the package with no C compiler (CC=false): there the
# kernel is absent by design, and the compiled variants of a test are skipped.
BUILT_WITHOUT_COMPILER = os.environ.get("GROUNDKIT_BUILT_WITHOUT_COMPILER") == "1"

KERNELS = pytest.mark.parametrize(
    "compiled", [pytest.param(True, id="compiled"), pytest.param(False, id="numpy")]
)


@contextmanager
def lexical_path(compiled: bool) -> Iterator[None]:
    """Searches inside run on the compiled kernel (``compiled``) or on numpy."""
    if compiled and bm25._kernel is None:
        if BUILT_WITHOUT_COMPILER:
            pytest.skip("installed without a C compiler")
        if os.environ.get("CI"):
            pytest.fail("the compiled kernel was not built (a C compiler is needed)")
        pytest.skip("the compiled kernel was not built")
    with mock.patch.object(bm25, "_USE_KERNEL", compiled):
        yield


def numpy_only() -> mock._patch[bool]:
    return mock.patch.object(bm25, "_USE_KERNEL", False)
