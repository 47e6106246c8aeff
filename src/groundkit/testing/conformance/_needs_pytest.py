"""Fails the import of the conformance suites, with the install to run, without pytest."""

from __future__ import annotations

import importlib.util

from groundkit.errors import ConfigurationError

if importlib.util.find_spec("pytest") is None or importlib.util.find_spec("pytest_asyncio") is None:
    raise ConfigurationError(
        "the conformance suites run under pytest and pytest-asyncio: pip install 'groundkit[test]'"
    )
