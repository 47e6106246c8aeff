"""Without its framework, an integration module says which extra to install."""

from __future__ import annotations

import subprocess
import sys

import pytest

CASES = [
    ("langchain", "langchain_core", "langchain"),
    ("llama_index", "llama_index", "llama-index"),
    ("haystack", "haystack", "haystack"),
]


@pytest.mark.parametrize(("module", "framework", "extra"), CASES)
def test_import_without_the_framework_names_the_extra(
    module: str, framework: str, extra: str
) -> None:
    code = (
        "import sys\n"
        f"sys.modules[{framework!r}] = None\n"
        "import groundkit\n"
        "try:\n"
        f"    import groundkit.integrations.{module}\n"
        "except groundkit.ConfigurationError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert f"pip install groundkit[{extra}]" in done.stdout


def test_the_package_itself_imports_no_framework() -> None:
    code = (
        "import sys, groundkit.integrations\n"
        "print(sorted({'langchain_core', 'llama_index', 'haystack'} & set(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"
