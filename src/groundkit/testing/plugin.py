"""The pytest plugin ``groundkit``: ini options and the ``grounded`` fixtures.

Registered through the ``pytest11`` entry point, so pytest loads it wherever groundkit
is installed; it is the only part of ``groundkit.testing`` that imports pytest (the
asserts themselves need none).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from groundkit.testing import AnswerGrounding, Grounding

# The shipped conformance suites are plain pytest classes; their asserts should read
# as well as a user's own when they fail.
pytest.register_assert_rewrite("groundkit.testing.conformance")

__all__ = [
    "grounded",
    "grounded_answer",
    "groundkit_base_dir",
    "groundkit_snapshot_dir",
    "pytest_addoption",
]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "groundkit_base_dir",
        "directory citation sources are relative to, for the 'grounded' fixture "
        "(relative to the ini file; default: the rootdir)",
        default="",
    )
    parser.addini(
        "groundkit_snapshot_dir",
        "<index_dir>/<collection>.snapshots, for URL citations (relative to the ini file)",
        default="",
    )


def _ini_path(config: pytest.Config, name: str) -> Path | None:
    value = str(config.getini(name)).strip()
    if not value:
        return None
    anchor = config.inipath.parent if config.inipath is not None else config.rootpath
    return (anchor / value).resolve()


@pytest.fixture
def groundkit_base_dir(pytestconfig: pytest.Config) -> Path:
    """The ``groundkit_base_dir`` ini option as a path (default: the rootdir)."""
    return _ini_path(pytestconfig, "groundkit_base_dir") or pytestconfig.rootpath


@pytest.fixture
def groundkit_snapshot_dir(pytestconfig: pytest.Config) -> Path | None:
    """The ``groundkit_snapshot_dir`` ini option as a path, or None."""
    return _ini_path(pytestconfig, "groundkit_snapshot_dir")


@pytest.fixture
def grounded(groundkit_base_dir: Path, groundkit_snapshot_dir: Path | None) -> Grounding:
    """``grounded(answer_quotes, results)`` asserts the answer is grounded."""
    return Grounding(groundkit_base_dir, groundkit_snapshot_dir)


@pytest.fixture
def grounded_answer(
    groundkit_base_dir: Path, groundkit_snapshot_dir: Path | None
) -> AnswerGrounding:
    """``grounded_answer(answer, results)`` asserts every sentence of the answer is grounded."""
    return AnswerGrounding(groundkit_base_dir, groundkit_snapshot_dir)
