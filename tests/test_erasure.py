"""Erasing deletes: after ``delete(..., erase=True)`` no file of the collection holds the
documents' text, terms or vectors (adr/0053-erasure.md).

Every byte of every file under the index directory is searched for a token only the
erased documents contain (UTF-8 and UTF-16LE, any case) and for the float32 bytes of
their vectors, first to show the search finds them before the erase, then to show it
finds nothing after.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import groundkit.sync as gks
from groundkit import Collection, ErasureReport, IngestConfig, Record
from groundkit.ingestion.url_loader import UrlLoader
from groundkit.storage import PostgresMetadataStore, SQLiteMetadataStore
from groundkit.storage.lancedb import LanceDBVectorStore
from groundkit.storage.names import document_id_for
from groundkit.storage.snapshots import KEPT_SUFFIX, kept_name, text_name
from groundkit.testing.conformance.helpers import put
from groundkit.utils.hashing import sha256_text
from groundkit.utils.url_safety import AddressPolicy
from tests.sources import Route, Site
from tests.support import SMALL_CHUNKS, ToyEmbedder, write_tree
from tests.test_cli import run

pytest.importorskip("lancedb")

TOKEN = "Zqxerasetoken"
SECRET_V1 = f"# Ledger\n\nThe vault code is {TOKEN} and the quokka guards it.\n"
SECRET_V2 = f"# Ledger\n\nThe vault code moved: {TOKEN} now sits with the narwhal.\n"
KEEP = {
    "docs/keep.md": "# Tea\n\nGreen tea is brewed at about eighty degrees.\n",
    "docs/coffee.md": "# Coffee\n\nEspresso wants finely ground beans and pressure.\n",
    "more/river.md": "# River\n\nThe river floods the meadow every spring.\n",
}


def findings(root: Path, needles: dict[str, bytes]) -> dict[str, list[str]]:
    """``{needle name: files under root holding it}``, read byte for byte (lowercased,
    so the text needles are matched in any case)."""
    found: dict[str, list[str]] = {name: [] for name in needles}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if path.name.endswith(KEPT_SUFFIX):
            # A kept copy is compressed: its bytes would hide the token. Both are searched.
            data += zlib.decompress(data)
        lowered = data.lower()
        for name, needle in needles.items():
            if needle in (lowered if name.startswith("text") else data):
                found[name].append(str(path.relative_to(root)))
    return {name: files for name, files in found.items() if files}


def token_needles() -> dict[str, bytes]:
    word = TOKEN.lower()
    return {"text-utf8": word.encode("utf-8"), "text-utf16": word.encode("utf-16le")}


async def vector_bytes(col: Collection, document_id: str) -> list[bytes]:
    """The float32 bytes of every stored vector of ``document_id``, as LanceDB keeps them."""
    assert isinstance(col.vector_store, LanceDBVectorStore)
    table = col.vector_store.table
    rows = await table.query().where(f"document_id = '{document_id}'").to_arrow()
    return [bytes(memoryview(vector.values.to_numpy())) for vector in rows["vector"]]


@pytest.fixture
def site() -> Iterator[Site]:
    served = Site()
    served.routes["/vault.txt"] = Route(
        body=f"Harbour notes: the pier code is {TOKEN}.\n".encode(),
        headers={"Content-Type": "text/plain"},
    )
    served.routes["/cranes.txt"] = Route(
        body=b"Harbour cranes lift containers off the ships.\n",
        headers={"Content-Type": "text/plain"},
    )
    yield served
    served.close()


def open_collection(index: Path, base: Path) -> Any:
    return Collection.open(
        index,
        base_dir=base,
        chunking=SMALL_CHUNKS,
        embedder=ToyEmbedder(),
        url_loader=UrlLoader(policy=AddressPolicy.allowing("127.0.0.0/8")),
    )


async def test_erase_leaves_no_byte_of_the_documents(tmp_path: Path, site: Site) -> None:
    base, index = tmp_path / "base", tmp_path / "index"
    write_tree(base, {**KEEP, "docs/secret.md": SECRET_V1})
    secret_url, other_url = site.url("/vault.txt"), site.url("/cranes.txt")
    async with open_collection(index, base) as col:
        # Several writes, so several segments, and an optimize in between.
        assert not (await col.ingest(base / "docs")).failed
        await col.add_documents(
            [
                Record(id="T-1", text=f"Ticket: reset the badge reader, code {TOKEN}."),
                Record(id="T-2", text="Ticket: the printer on floor two jams."),
            ]
        )
        assert (await col.ingest(secret_url)).added == [secret_url]
        assert (await col.ingest(other_url)).added == [other_url]
        assert (await col.optimize()).segments_after == 1
        (hit,) = (await col.search(TOKEN, top_k=10, filters={"source": "docs/secret.md"})).results
        secret_id = hit.document_id
        first_vectors = await vector_bytes(col, secret_id)
        # A second version of the secret file; the first is kept as a past version.
        (base / "docs/secret.md").write_text(SECRET_V2, encoding="utf-8")
        assert (await col.ingest(base / "docs")).updated == ["docs/secret.md"]
        assert not (await col.ingest(base / "more")).failed
        hits = (await col.search(TOKEN, top_k=10)).results
        assert {h.source for h in hits} == {"docs/secret.md", "record://T-1", secret_url}
        ids = {h.source: h.document_id for h in hits}
        vectors = [v for i in ids.values() for v in await vector_bytes(col, i)]
        vectors += first_vectors
        needles = {
            **token_needles(),
            **{f"vector-{i}": v for i, v in enumerate(vectors)},
        }
        # The search finds them all before the erase: it would see them after.
        before = findings(index, needles)
        assert set(before) == set(needles) - {"text-utf16"}, before
        assert any(f.endswith(".pack") for f in before["text-utf8"]), before

        report = await col.delete(
            sources=["docs/secret.md", secret_url],
            ids=[ids["record://T-1"]],
            erase=True,
        )
        assert report.deleted == sorted(["docs/secret.md", "record://T-1", secret_url])
        assert report.missing == []
        erasure = report.erasure
        assert isinstance(erasure, ErasureReport) and erasure.complete, erasure
        assert (erasure.documents, erasure.versions) == (3, 1)
        assert erasure.chunks >= 4 and erasure.terms >= 1
        assert erasure.vector_rows == len(vectors) - len(first_vectors)
        assert erasure.vector_versions >= 1 and erasure.vector_bytes > 0
        assert erasure.packs_written >= 2 and erasure.packs_removed >= 2
        assert erasure.snapshots == 2  # the URL's text and the record's
        # Nothing left while the collection is still open (WAL and shared memory too)...
        assert findings(index, needles) == {}
        assert (await col.search(TOKEN, top_k=10)).results == []
        other = (await col.search("printer jams", top_k=3)).results
        assert [h.source for h in other][:1] == ["record://T-2"]
    # ...nor once it is closed.
    assert findings(index, needles) == {}
    async with open_collection(index, base) as col:
        assert (await col.search(TOKEN, top_k=10)).results == []
        dense = (await col.search(TOKEN, top_k=10, mode="dense")).results
        assert {h.source for h in dense} == {*KEEP, other_url, "record://T-2"}
        for query, source in [
            ("green tea degrees", "docs/keep.md"),
            ("espresso beans", "docs/coffee.md"),
            ("river meadow", "more/river.md"),
            ("harbour cranes", other_url),
            ("printer jams", "record://T-2"),
        ]:
            top = (await col.search(query, top_k=1, mode="hybrid")).results[0]
            assert top.source == source
            assert (await col.verify(top)).ok
        assert (await col.verify_all()).ok
        # Erasing again finds nothing left to do, and says so.
        again = await col.delete(sources=["docs/secret.md"], erase=True)
        assert again.missing == ["docs/secret.md"]
        assert again.erasure is not None and again.erasure.complete
        assert (again.erasure.documents, again.erasure.terms, again.erasure.snapshots) == (0, 0, 0)


async def test_an_interrupted_erase_is_completed_by_running_it_again(tmp_path: Path) -> None:
    # The documents went by a plain delete (an erase stopped after its first step
    # leaves the same): an erase naming them finds them missing and still removes
    # what the delete left in the files.
    base, index = tmp_path / "base", tmp_path / "index"
    write_tree(base, {**KEEP, "docs/secret.md": SECRET_V1})
    async with open_collection(index, base) as col:
        await col.ingest(base)
        await col.add_documents([Record(id="T-1", text=f"code {TOKEN}")])
        await col.optimize()
        plain = await col.delete(sources=["docs/secret.md", "record://T-1"])
        assert plain.erasure is None and len(plain.deleted) == 2
        assert findings(index, token_needles())  # a plain delete leaves copies
        report = await col.delete(sources=["docs/secret.md", "record://T-1"], erase=True)
        assert report.missing == ["docs/secret.md", "record://T-1"]
        assert report.erasure is not None and report.erasure.complete
        assert report.erasure.terms >= 1 and report.erasure.vector_versions >= 1
    assert findings(index, token_needles()) == {}


async def test_an_erase_spares_a_text_another_writer_has_not_committed(
    tmp_path: Path,
) -> None:
    """A text no row names yet (another process between its text and its commit) is
    kept by an erase; the erased record's texts, every version's, are not."""
    base, index = tmp_path / "base", tmp_path / "index"
    base.mkdir()
    async with open_collection(index, base) as col:
        await col.add_documents([Record(id="T-1", text=f"first {TOKEN}")])
        await col.add_documents([Record(id="T-1", text=f"second {TOKEN}")])
        assert col.snapshots is not None
        in_flight = text_name(document_id_for("record://T-9"), "ab" * 32)
        (index / "default.snapshots" / in_flight).write_text("not yet committed")
        report = await col.delete(sources=["record://T-1"], erase=True)
        assert report.erasure is not None and report.erasure.snapshots >= 2
        assert (index / "default.snapshots" / in_flight).exists()
    assert findings(index, token_needles()) == {}


async def test_an_erase_removes_the_kept_copies_of_the_files(tmp_path: Path) -> None:
    """With ``keep_sources``, each file's text is also kept, compressed: every version's
    copy of an erased file goes, the other files' stay."""
    base, index = tmp_path / "base", tmp_path / "index"
    write_tree(base, {**KEEP, "docs/secret.md": SECRET_V1})
    snapshots = index / "default.snapshots"
    opened = Collection.open(
        index, base_dir=base, chunking=SMALL_CHUNKS, ingest=IngestConfig(keep_sources=True)
    )
    async with opened as col:
        await col.ingest(base)
        secret_id = document_id_for("docs/secret.md")
        first = snapshots / kept_name(secret_id, sha256_text(SECRET_V1))
        assert first.is_file() and TOKEN.encode() not in first.read_bytes()
        (base / "docs/secret.md").write_text(SECRET_V2, encoding="utf-8")
        await col.ingest(base)
        second = snapshots / kept_name(secret_id, sha256_text(SECRET_V2))
        assert second.is_file()
        before = findings(index, token_needles())
        assert second.relative_to(index).as_posix() in before["text-utf8"], before
        others = {p.name for p in snapshots.iterdir()} - {first.name, second.name}
        assert len(others) == len(KEEP)
        report = await col.delete(sources=["docs/secret.md"], erase=True)
        assert report.erasure is not None and report.erasure.complete
        assert not first.exists() and not second.exists()
        assert {p.name for p in snapshots.iterdir()} == others
        assert findings(index, token_needles()) == {}
        hit = (await col.search("green tea", top_k=1)).results[0]
        (base / hit.source).unlink()
        kept = await col.verify(hit)
        assert (kept.verification, kept.read_from) == ("verified", "kept copy")


def test_the_blocking_api_erases_through_the_same_code(tmp_path: Path) -> None:
    assert gks.SyncCollection.delete.__wrapped__ is Collection.delete  # type: ignore[attr-defined]
    base, index = tmp_path / "base", tmp_path / "index"
    write_tree(base, {**KEEP, "docs/secret.md": SECRET_V1})
    with gks.Collection.open(index, base_dir=base, chunking=SMALL_CHUNKS) as col:
        col.ingest(base)
        report = col.delete(sources=["docs/secret.md"], erase=True)
        assert report.erasure is not None and report.erasure.complete
        assert report.erasure.documents == 1
        assert col.search("tea", top_k=1).results[0].source == "docs/keep.md"
    assert findings(index, token_needles()) == {}


def test_grk_delete_erase(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_tree(tmp_path, {**KEEP, "docs/secret.md": SECRET_V1})
    common = ["--index-dir", str(tmp_path / "idx"), "--base-dir", str(tmp_path)]
    assert run(capsys, "ingest", str(tmp_path / "docs"), *common, "-q")[0] == 0
    assert run(capsys, "ingest", str(tmp_path / "more"), *common, "-q")[0] == 0
    assert run(capsys, "optimize", *common, "-q")[0] == 0
    assert findings(tmp_path / "idx", token_needles())
    code, out, _ = run(capsys, "delete", "docs/secret.md", "--erase", "--json", *common)
    assert code == 0, out
    shown = json.loads(out)
    assert shown["deleted"] == ["docs/secret.md"] and shown["missing"] == []
    assert shown["erasure"]["documents"] == 1 and shown["erasure"]["unfinished"] == []
    assert findings(tmp_path / "idx", token_needles()) == {}
    code, out, _ = run(capsys, "search", "green tea", *common, "--json")
    assert code == 0 and json.loads(out)["results"][0]["citation"]["source"] == "docs/keep.md"
    # Human output; a name that matches nothing is still a problem (exit 1).
    code, out, _ = run(capsys, "delete", "docs/secret.md", "--erase", *common)
    assert code == 1
    assert "missing: docs/secret.md" in out and "erased 0 documents" in out
    # Without --erase the JSON is as it always was.
    code, out, _ = run(capsys, "delete", "docs/coffee.md", "--json", *common)
    assert code == 0 and json.loads(out) == {"deleted": ["docs/coffee.md"], "missing": []}


@pytest.fixture(params=["sqlite", "postgres"])
def two_handles(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A way to open a second (and first) handle on one collection: two processes."""
    if request.param == "sqlite":
        return lambda: SQLiteMetadataStore.open(tmp_path / "meta.sqlite3")
    dsn, name = request.getfixturevalue("postgres_dsn"), request.getfixturevalue("fresh")
    return lambda: PostgresMetadataStore.open(dsn, name, max_connections=2)


async def test_a_stale_vocabulary_in_another_handle_is_read_again(two_handles: Any) -> None:
    # Two handles on one collection (two processes): the first cached "alpha"'s id, the
    # second erased it. A write of "alpha" through the first must not reuse that id.
    first = await two_handles()
    second = await two_handles()
    try:
        await put(first, "a.txt", ["alpha words"])
        await put(first, "b.txt", ["beta words"])
        old = (await first.vocabulary())["alpha"]
        assert (await second.erase_documents(["a.txt"])).terms == 1
        await put(first, "c.txt", ["alpha again"])
        fresh = await second.vocabulary()
        assert fresh["alpha"] > old
        assert await second.term_ids(["alpha"]) == {"alpha": fresh["alpha"]}
        found = await second.find_documents(sources=["c.txt"])
        chunks = await second.get_chunks_for_documents([found[0].document_id])
        assert [c.content for c in chunks[found[0].document_id]] == ["alpha again"]
    finally:
        await first.close()
        await second.close()


async def test_vector_erase_with_an_ann_index(tmp_path: Path) -> None:
    # A table large enough for its vector index: the erased rows leave every data file
    # and the index, and the index still answers for the rows that stay.
    import numpy as np

    store = await LanceDBVectorStore.open(tmp_path, "c", 16, ann_threshold=300)
    try:
        rng = np.random.default_rng(7)
        rows = rng.standard_normal((400, 16)).astype(np.float32)
        for start in range(0, 400, 100):  # several writes: several fragments
            docs = [
                (f"d{i:03d}", [f"c{i:03d}"], rows[i : i + 1]) for i in range(start, start + 100)
            ]
            await store.upsert_documents(docs)
        assert await store.has_ann_index()
        unit = rows / np.linalg.norm(rows.astype(np.float64), axis=1, keepdims=True)
        gone = {f"v{i}": unit[i].astype(np.float32).tobytes() for i in (5, 250)}
        assert set(findings(tmp_path / "c.lance", gone)) == set(gone)
        erased = await store.erase_documents(["d005", "d250"], keep=None)
        assert erased.rows == 2 and erased.versions >= 1
        assert findings(tmp_path / "c.lance", gone) == {}
        assert await store.count() == 398 and await store.has_ann_index()
        hit = (await store.query(rows[17], 1))[0]
        assert hit.document_id == "d017"
        # Orphans too: rows of documents the metadata store no longer has.
        again = await store.erase_documents([], keep={f"d{i:03d}" for i in range(1, 400)})
        assert again.rows == 1 and "d000" not in await store.document_ids()
    finally:
        await store.close()
