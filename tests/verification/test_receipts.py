"""Receipts: a citation as a W3C Web Annotation, written to a file and checked back by
``grk verify --receipts`` with no index, with the verdict every other entry point gives."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groundkit import (
    ChunkingConfig,
    Citation,
    Collection,
    ConfigurationError,
    IngestConfig,
    InvalidQueryError,
    Receipt,
    ReceiptError,
    Record,
    RetrievalError,
    RetrievalResult,
    check_citation,
    check_receipts,
    read_receipts,
    write_receipts,
)
from groundkit.cli import main
from groundkit.utils.annotation import (
    ANNOTATION_CONTEXT,
    QUOTE_CONTEXT_CHARS,
    TextDirective,
    encode_directive_part,
    parse_text_directive,
    text_directive,
)
from groundkit.verification.anchoring import CONTEXT_CHARS
from groundkit.verification.receipts import parse_receipts
from tests.support import write_tree

NOTES = (
    "Alpha line opens the notes here. Beta line follows it closely.\n\n"
    "Gamma line sits in the middle of them. Delta line holds the fact we cite.\n\n"
    "Epsilon line closes the notes. Zeta line is the very last one.\n"
)
OTHER = "Omega notes stand alone in a second file about nothing else.\n"


@pytest.fixture
async def col(tmp_path: Path) -> AsyncIterator[Collection]:
    base = tmp_path / "corpus"
    write_tree(base, {"notes.txt": NOTES, "other.txt": OTHER})
    chunking = ChunkingConfig(max_chars=80, overlap_chars=20)
    async with Collection.open(tmp_path / "index", base_dir=base, chunking=chunking) as opened:
        await opened.ingest(base)
        yield opened


async def delta(col: Collection, *, expand: bool = True) -> RetrievalResult:
    """The chunk holding the Delta sentence (with the passage around it when ``expand``)."""
    response = await col.search("delta fact", 1, expand="window" if expand else None)
    (result,) = response.results
    assert "Delta line" in result.content and result.start_offset > 0
    return result


async def grk(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``grk`` in-process (its own event loop, so in a thread of its own)."""
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- the annotation ----------------------------------------------------------------


async def test_a_result_becomes_a_w3c_web_annotation(col: Collection) -> None:
    result = await delta(col)
    annotation = result.to_annotation()
    context = annotation["@context"]
    assert context[0] == ANNOTATION_CONTEXT and "groundkit" in context[1]
    assert annotation["type"] == "Annotation"
    assert annotation["id"].startswith("urn:uuid:")
    target = annotation["target"]
    assert target["source"] == "notes.txt"
    quote_selector, position = target["selector"]
    assert quote_selector == {
        "type": "TextQuoteSelector",
        "exact": result.content,
        # The source text either side, as the expanded passage gives it.
        "prefix": NOTES[result.start_offset - QUOTE_CONTEXT_CHARS : result.start_offset],
        "suffix": NOTES[result.end_offset : result.end_offset + QUOTE_CONTEXT_CHARS],
    }
    assert position == {
        "type": "TextPositionSelector",
        "start": result.start_offset,
        "end": result.end_offset,
    }
    assert NOTES[position["start"] : position["end"]] == quote_selector["exact"]
    assert target["groundkit:sourceClass"] == "text"
    assert target["groundkit:documentId"] == result.document_id
    assert target["groundkit:chunkId"] == result.chunk_id
    assert target["groundkit:version"] == 1
    assert target["groundkit:collection"] == "default"
    assert target["groundkit:contentHash"].startswith("sha256:")
    assert "groundkit:extractor" not in target and "groundkit:link" not in target
    # Plain JSON, and the same annotation every time.
    assert json.loads(json.dumps(annotation)) == annotation
    assert (await delta(col)).to_annotation() == annotation
    fetched = await col.fetch_chunk(result.chunk_id)
    assert fetched.to_annotation()["target"]["selector"][0]["exact"] == result.content


def test_the_context_either_side_is_what_re_anchoring_compares() -> None:
    assert QUOTE_CONTEXT_CHARS == CONTEXT_CHARS


async def test_only_the_context_nearest_the_text_counts(tmp_path: Path) -> None:
    """A prefix or suffix of any length is read, but only its CONTEXT_CHARS nearest the
    exact text are weighed, as a collection weighs its indexed context: each occurrence
    searched the whole of it, so a 4 MB prefix took seconds per receipt."""
    fact = "Delta line holds the fact we cite."
    before, after = "The second copy of it is this one: ", " And nothing more follows it."
    now = f"Intro. {fact} Other words here.\n\n{before}{fact}{after}\n"
    write_tree(tmp_path, {"notes.txt": now})
    annotation = _at("notes.txt", "text", end_offset=len(fact)).to_annotation(fact)
    quote_selector = annotation["target"]["selector"][0]
    quote_selector["prefix"] = "unrelated text " * 1000 + before[-CONTEXT_CHARS:]
    quote_selector["suffix"] = after[:CONTEXT_CHARS] + " unrelated text" * 1000
    [checked] = await check_receipts([annotation], tmp_path)
    assert checked.verification == "moved", checked.detail
    assert checked.current_start_offset == now.index(before) + len(before)


async def test_the_exact_text_must_fit_the_citation(col: Collection) -> None:
    result = await delta(col)
    with pytest.raises(RetrievalError, match="does not fit the citation's span"):
        result.citation.to_annotation(result.content + "!")


# -- round trip and verdicts -------------------------------------------------------


@pytest.mark.parametrize("name", ["receipts.json", "receipts.jsonl"])
async def test_search_to_file_to_grk_verify_round_trip(
    col: Collection, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    response = await col.search("line notes", 10)
    assert len(response.results) >= 3
    path = tmp_path / name
    await write_receipts(path, [r.to_annotation() for r in response.results])
    text = path.read_text(encoding="utf-8")
    assert text.startswith("[" if name.endswith(".json") else "{")
    base = str(tmp_path / "corpus")
    code, out, err = await grk(
        capsys, "verify", "--receipts", str(path), "--base-dir", base, "--json"
    )
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert report["receipts"] == report["verified"] == len(response.results)
    assert [r["receipt"] for r in report["results"]] == list(range(1, len(response.results) + 1))
    assert [r["content"] for r in report["results"]] == [r.content for r in response.results]
    code, out, _ = await grk(capsys, "verify", "--receipts", str(path), "--base-dir", base)
    assert code == 0
    assert out.startswith(f"verified {len(response.results)}, moved 0, drifted 0")


async def test_json_lines_keep_unicode_line_separators_inside_their_strings(
    tmp_path: Path,
) -> None:
    """``write_receipts`` leaves U+2028, U+2029 and U+0085 unescaped in a cited text;
    JSON Lines ends lines at "\\n" only, so the file reads back."""
    base = tmp_path / "corpus"
    write_tree(base, {"seps.txt": "One\u2028two\u2029three\x85four. Then more text.\r\n"})
    async with Collection.open(tmp_path / "index", base_dir=base) as opened:
        await opened.ingest(base)
        (result,) = (await opened.search("two three", 1)).results
    assert "\u2028" in result.content
    path = tmp_path / "receipts.jsonl"
    await write_receipts(path, [result.to_annotation(), result.to_annotation()])
    receipts = await read_receipts(path)
    assert [r.exact for r in receipts] == [result.content, result.content]
    checked = await check_receipts(receipts, base)
    assert [c.verification for c in checked] == ["verified", "verified"]
    crlf = path.read_text(encoding="utf-8").replace("}\n", "}\r\n\r\n")
    assert [r.exact for r in parse_receipts(crlf)] == [result.content, result.content]


EDITS: dict[str, Callable[[Path, str], object]] = {
    # Text inserted above: the passage is intact, elsewhere.
    "moved": lambda path, chunk: path.write_text("A new first line.\n\n" + NOTES),
    # A word of the passage changed.
    "drifted": lambda path, chunk: path.write_text(NOTES.replace("fact we cite", "fact we doubt")),
    # The passage repeated above: the text around it tells which one is cited.
    "repeated": lambda path, chunk: path.write_text(chunk + "\n\n" + NOTES),
    "removed": lambda path, chunk: path.unlink(),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
async def test_an_edited_source_reads_as_collection_verify_reads_it(
    col: Collection, tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: str
) -> None:
    result = await delta(col)
    path = tmp_path / "receipts.json"
    await write_receipts(path, [result.to_annotation()])
    EDITS[edit](tmp_path / "corpus" / "notes.txt", result.content)
    expected = await col.verify(result)
    assert (
        expected.verification
        == {
            "moved": "moved",
            "drifted": "drifted",
            "repeated": "moved",
            "removed": "unresolvable",
        }[edit]
    )
    (checked,) = await check_receipts(await read_receipts(path), tmp_path / "corpus")
    assert checked == expected
    code, out, _ = await grk(
        capsys, "verify", "--receipts", str(path), "--base-dir", str(tmp_path / "corpus"), "--json"
    )
    assert code == 1
    (shown,) = json.loads(out)["results"]
    assert shown.pop("receipt") == 1
    assert shown == expected.model_dump(mode="json")


async def test_without_the_text_around_it_a_repeated_passage_is_not_guessed(
    col: Collection, tmp_path: Path
) -> None:
    result = await delta(col, expand=False)
    annotation = result.to_annotation()
    assert set(annotation["target"]["selector"][0]) == {"type", "exact"}
    EDITS["repeated"](tmp_path / "corpus" / "notes.txt", result.content)
    (checked,) = await check_receipts([annotation], tmp_path / "corpus")
    assert checked.verification == "drifted"
    assert "appears 2 times" in checked.detail
    # What the standalone check of the same citation says, to the letter.
    assert checked == await check_citation(result.citation, result.content, tmp_path / "corpus")


async def test_each_source_is_read_once_and_results_keep_their_order(
    col: Collection, tmp_path: Path
) -> None:
    response = await col.search("line notes omega", 10)
    annotations = [r.to_annotation() for r in response.results]
    (tmp_path / "corpus" / "other.txt").unlink()
    checked = await check_receipts(annotations, tmp_path / "corpus")
    assert [c.citation for c in checked] == [r.citation for r in response.results]
    assert [c.verification for c in checked] == [
        "unresolvable" if r.source == "other.txt" else "verified" for r in response.results
    ]


async def test_a_receipt_never_reads_outside_the_base_directory(
    col: Collection, tmp_path: Path
) -> None:
    (tmp_path / "secret.txt").write_text("Alpha", encoding="utf-8")
    escapes = ["../secret.txt", str(tmp_path / "secret.txt"), "sub/../../secret.txt"]
    annotations = [_at(source, "text", end_offset=5).to_annotation("Alpha") for source in escapes]
    checked = await check_receipts(annotations, tmp_path / "corpus")
    assert [c.verification for c in checked] == ["unresolvable"] * 3
    assert all(c.detail.startswith("refused: ") for c in checked)


async def test_record_receipts_read_the_snapshot_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    index = tmp_path / "index"
    async with Collection.open(index, base_dir=tmp_path) as col:
        await col.add_documents([Record(id="ticket-7", text="The printer on floor two jams.")])
        (result,) = (await col.search("printer jams", 3)).results
        snapshots = col.snapshot_dir
    assert result.source == "record://ticket-7" and isinstance(snapshots, Path)
    path = tmp_path / "receipts.jsonl"
    await write_receipts(path, [result.to_annotation()])
    code, out, _ = await grk(
        capsys, "verify", "--receipts", str(path), "--snapshot-dir", str(snapshots)
    )
    assert code == 0 and out.startswith("verified 1,")
    # A relative --snapshot-dir is from the working directory, as any path argument.
    monkeypatch.chdir(tmp_path)
    relative = str(snapshots.relative_to(tmp_path))
    code, out, _ = await grk(capsys, "verify", "--receipts", str(path), "--snapshot-dir", relative)
    assert code == 0 and out.startswith("verified 1,")
    assert [
        c.verification
        for c in await check_receipts([result.to_annotation()], tmp_path, snapshot_dir=relative)
    ] == ["verified"]
    code, out, _ = await grk(capsys, "verify", "--receipts", str(path), "--json")
    assert code == 1
    (shown,) = json.loads(out)["results"]
    assert shown["verification"] == "unresolvable"
    assert "snapshot" in shown["detail"]


async def test_a_receipt_naming_another_source_is_not_read_from_its_text(
    tmp_path: Path,
) -> None:
    """Stored texts are found by document id: a receipt whose id is another source's
    (a record never ingested, a file that is not there) must not verify that text."""
    (tmp_path / "notes.md").write_text("Refunds are paid within 14 days.\n", "utf-8")
    config = IngestConfig(keep_sources=True)
    async with Collection.open(tmp_path / "index", base_dir=tmp_path, ingest=config) as col:
        await col.add_documents([Record(id="real", text="The kettle on floor two leaks.")])
        await col.ingest(tmp_path / "notes.md")
        record = (await col.search("kettle leaks", 1)).results[0]
        note = (await col.search("refunds paid", 1)).results[0]
        snapshots = col.snapshots
        (tmp_path / "notes.md").unlink()  # read from its kept copy from now on
        genuine = [record.to_annotation(), note.to_annotation()]
        checked = await check_receipts(genuine, tmp_path, snapshot_dir=snapshots)
        assert [c.verification for c in checked] == ["verified", "verified"]
        assert checked[1].read_from == "kept copy"
        forged = copy.deepcopy(genuine)
        forged[0]["target"]["source"] = "record://approved-statement"
        forged[1]["target"]["source"] = "contract.md"
        for receipt in forged:
            receipt["target"].pop("groundkit:chunkId", None)
        checked = await check_receipts(forged, tmp_path, snapshot_dir=snapshots)
        assert [c.verification for c in checked] == ["unresolvable", "unresolvable"]
        assert all("is not the id of" in c.detail for c in checked)
        # A citation made by hand meets the same check in the collection.
        citation = record.citation.model_copy(update={"source": "record://approved-statement"})
        assert (await col.verify(citation)).verification == "unresolvable"


async def test_snapshot_dir_goes_with_receipts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = await grk(capsys, "verify", "--snapshot-dir", str(tmp_path))
    assert code == 2 and "--snapshot-dir goes with --receipts" in err


# -- malformed receipts ------------------------------------------------------------


def _good() -> dict[str, Any]:
    return _at("notes.txt", "text", end_offset=5).to_annotation("Alpha")


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    *parents, last = path.split("/")

    def change(annotation: dict[str, Any]) -> None:
        holder: Any = annotation
        for key in parents:
            holder = holder[int(key)] if isinstance(holder, list) else holder[key]
        if value is _DROP:
            del holder[int(last) if isinstance(holder, list) else last]
        elif isinstance(holder, list):
            holder[int(last)] = value
        else:
            holder[last] = value

    return change


_DROP = object()
MALFORMED: list[tuple[Callable[[dict[str, Any]], None], str]] = [
    (_set("@context", "http://example.org/other.jsonld"), "its @context does not name"),
    (_set("type", "Note"), "its type is not 'Annotation'"),
    (_set("target", "notes.txt"), "its target must be one JSON object"),
    (_set("target/source", _DROP), "the target has no 'source'"),
    (_set("target/source", 7), "the target 'source' must be a string, not int"),
    (_set("target/selector/1", _DROP), "exactly one TextPositionSelector, it has 0"),
    (_set("target/selector/0/exact", _DROP), "the TextQuoteSelector has no 'exact'"),
    (_set("target/selector/1/start", -1), "must be a whole number >= 0, not -1"),
    (_set("target/selector/1/end", True), "must be a whole number >= 0, not True"),
    (_set("target/selector/1/end", 9), "spans 0..9 (9 characters) but the exact text has 5"),
    (_set("target/selector/0/exact", "Alpho"), "does not hash to its groundkit:contentHash"),
    (_set("target/groundkit:sourceClass", "scroll"), "'scroll' is not one of"),
    (_set("target/groundkit:sourceClass", "record"), "needs groundkit:documentId"),
    (_set("target/groundkit:sourceClass", "extracted"), "needs the identity of its extractor"),
    (_set("target/groundkit:version", "1"), "groundkit:version must be a int, not str"),
    (_set("target/groundkit:page", 0), "greater than or equal to 1"),
    # Named, never quoted (SPEC 8.4): a receipt may hold a document's text anywhere.
    (_set("target/selector/1/start", "secret " * 9000), "not a string of 63,000 characters"),
    (_set("target/selector/1/start", [["x"]]), ">= 0, not a list"),
    (_set("target/groundkit:sourceClass", "x" * 5000), "sourceClass a string of 5,000"),
    # An empty span lies at every offset of every file: it would always verify.
    (_set("target/selector/0/exact", ""), "'exact' is empty: a receipt stands for some text"),
]


@pytest.mark.parametrize(("change", "message"), MALFORMED)
def test_a_malformed_receipt_is_named_with_what_is_wrong(
    change: Callable[[dict[str, Any]], None], message: str
) -> None:
    bad = copy.deepcopy(_good())
    if bad["target"].get("groundkit:documentId") and "documentId" in message:
        del bad["target"]["groundkit:documentId"]
    change(bad)
    with pytest.raises(ReceiptError, match=r"^receipt 2: ") as caught:
        parse_receipts(json.dumps([_good(), bad]))
    assert caught.value.number == 2
    assert message in str(caught.value)
    assert len(str(caught.value)) < 300 and "secret" not in str(caught.value)


def test_a_hand_made_receipt_of_no_text_is_refused(tmp_path: Path) -> None:
    empty = Receipt(_at("notes.txt", "text", end_offset=0), "")
    with pytest.raises(ReceiptError, match="exact text is empty"):
        asyncio.run(check_receipts([empty], tmp_path))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
async def test_a_receipts_file_that_is_no_regular_file_is_refused_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A FIFO with no writer would block the read for ever (and grk with it).
    fifo = tmp_path / "receipts.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(ConfigurationError, match="not a regular file"):
        await read_receipts(fifo)
    code, _, err = await grk(capsys, "verify", "--receipts", str(fifo))
    assert code == 2 and "not a regular file" in err
    with pytest.raises(ConfigurationError, match="not a regular file"):
        await read_receipts(tmp_path)


async def test_malformed_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = json.dumps(_good())
    with pytest.raises(ReceiptError, match=r"^receipt 2 \(line 3\) is not JSON"):
        parse_receipts(f"{good}\n\n{{not json\n")
    with pytest.raises(ReceiptError, match=r"^receipt 1: a receipt is a JSON object, not list"):
        parse_receipts("[[1]]")
    with pytest.raises(ReceiptError, match="NaN is not JSON"):
        parse_receipts('{"x": NaN}\n' + good)
    # A key given twice: JSON keeps the last, a person reading the file the first.
    twice = good.replace('"exact": ', '"exact": "Something else.", "exact": ', 1)
    with pytest.raises(ReceiptError, match=r"^receipt 2 \(line 2\) .*'exact' is given twice"):
        parse_receipts(f"{good}\n{twice}\n")
    with pytest.raises(ReceiptError, match="'exact' is given twice") as raised:
        parse_receipts(f"[{good}, {twice}]")
    assert raised.value.number == 2
    # In an indented array, the receipt at fault and what is wrong with it, not the
    # JSON Lines reading of the line "[".
    indented = json.dumps([_good(), _good(), _good()], indent=2)
    second = indented.index('"start"', indented.index('"start"') + 1)
    for value, why in (("NaN", "NaN is not JSON"), ("9" * 5000, "4300 digits")):
        broken = indented[:second] + f'"start": {value}' + indented[indented.index(",", second) :]
        with pytest.raises(ReceiptError, match=rf"^receipt 2 \(line \d+\) is not JSON: .*{why}"):
            parse_receipts(broken)
    with pytest.raises(ReceiptError, match=r"^receipt 3 .*expected ',' or '\]'"):
        parse_receipts(indented[:-1].rstrip() + "\n  {}\n]")
    with pytest.raises(ReceiptError, match="text after its JSON array"):
        parse_receipts(indented + "\n[]")
    # One annotation written over several lines, with a NaN deep inside.
    spread = json.dumps(_good(), indent=2).replace('"end": ', '"end": NaN, "x": ', 1)
    with pytest.raises(ReceiptError, match=r"^receipt 1 \(line 1\) is not JSON: NaN is not"):
        parse_receipts(spread)
    for empty in ("", "\n\n", "[]"):
        with pytest.raises(ReceiptError, match="holds no receipt"):
            parse_receipts(empty)
    jsonl = parse_receipts(f"{good}\n{good}\n")
    assert [r.number for r in jsonl] == [1, 2]
    assert isinstance(jsonl[0], Receipt) and jsonl[0].exact == "Alpha"
    path = tmp_path / "bad.jsonl"
    bad = copy.deepcopy(_good())
    bad["target"]["selector"] = []
    path.write_text(f"{good}\n{json.dumps(bad)}\n", encoding="utf-8")
    code, out, err = await grk(
        capsys, "verify", "--receipts", str(path), "--base-dir", str(tmp_path)
    )
    assert (code, out) == (2, "")
    assert err.startswith("grk: error: receipt 2 (line 2): the target needs exactly one")
    code, _, err = await grk(capsys, "verify", "--receipts", str(tmp_path / "missing.json"))
    assert code == 2 and "cannot read receipts file" in err
    (tmp_path / "latin1.json").write_bytes(b"\xff\xfe[")
    code, _, err = await grk(capsys, "verify", "--receipts", str(tmp_path / "latin1.json"))
    assert code == 2 and "is not UTF-8" in err


async def test_a_lone_surrogate_is_refused_where_a_receipt_is_made_or_read(
    tmp_path: Path,
) -> None:
    """JSON's ``\\ud800`` reads as a lone surrogate, which no source holds and UTF-8
    cannot write: a ``ReceiptError``/``RetrievalError``, not Python's encoding error."""
    citation = _at("notes.txt", "text", end_offset=5)
    with pytest.raises(RetrievalError, match="exact cannot be encoded as UTF-8"):
        citation.to_annotation("Alp\ud800a")
    for wrong in ({"prefix": 5}, {"suffix": b"x"}, {"collection": 1}, {"prefix": "\udfff"}):
        with pytest.raises(RetrievalError, match=next(iter(wrong))):
            citation.to_annotation("Alpha", **wrong)
    # ``\\ud800`` as JSON writes it, with the hash of the text around it left out.
    forged = json.dumps(_good()).replace("Alpha", "Alp\\ud800a")
    forged_hashless = json.loads(forged)
    del forged_hashless["target"]["groundkit:contentHash"]
    for text in (forged, json.dumps(forged_hashless)):
        with pytest.raises(ReceiptError, match=r"^receipt 1: .*'exact' cannot be encoded"):
            parse_receipts(text)
    with pytest.raises(ReceiptError, match="cannot be written as JSON"):
        await write_receipts(tmp_path / "never.jsonl", [json.loads(forged)])
    assert list(tmp_path.iterdir()) == []


async def test_receipt_functions_refuse_arguments_of_the_wrong_kind(tmp_path: Path) -> None:
    good = _good()
    for wrong in (None, 5, good):  # the last: one annotation, not a list of them
        with pytest.raises(ReceiptError, match="takes a list of receipts"):
            await check_receipts(wrong, tmp_path)  # type: ignore[arg-type]
        with pytest.raises(ReceiptError, match="takes a list of receipts"):
            await write_receipts(tmp_path / "r.jsonl", wrong)  # type: ignore[arg-type]
    for path in (None, 5, b"r.jsonl", "r\x00.jsonl"):
        with pytest.raises(InvalidQueryError, match="the receipts file to write"):
            await write_receipts(path, [good])  # type: ignore[arg-type]
        with pytest.raises(InvalidQueryError, match="the receipts file to read"):
            await read_receipts(path)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


_WRITE_PAST_A_SIZE_LIMIT = """
import resource, signal, sys
import groundkit.sync as gks
from groundkit import Citation, ConfigurationError

path, limit = sys.argv[1], int(sys.argv[2])
citation = Citation(document_id="d", chunk_id="c", source="notes.txt", source_class="text",
                    extractor=None, start_offset=0, end_offset=5)
many = [citation.to_annotation("Alpha", collection=str(n)) for n in range(200)]
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails, as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
try:
    gks.write_receipts(path, many)
except ConfigurationError as exc:
    print("refused:", exc)
"""


def test_a_write_that_fails_part_way_leaves_the_old_receipts_whole(tmp_path: Path) -> None:
    """A write cut short (here by a file-size limit, as by a full disk) must not leave
    the receipts file truncated: the new file replaces the old only once complete."""
    path = tmp_path / "receipts.jsonl"
    asyncio.run(write_receipts(path, [_good()]))
    before = path.read_bytes()
    repo = Path(__file__).resolve().parents[2]
    child = subprocess.run(
        [sys.executable, "-c", _WRITE_PAST_A_SIZE_LIMIT, str(path), str(len(before) * 4)],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo / "src")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.startswith("refused: cannot write receipts file")
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["receipts.jsonl"]


async def test_a_receipt_built_by_hand_is_checked_as_one_read_from_a_file(
    tmp_path: Path,
) -> None:
    write_tree(tmp_path, {"notes.txt": NOTES})
    citation = _at("notes.txt", "text", end_offset=5)
    swapped = citation.model_copy(update={"start_offset": 9, "end_offset": 2})
    wrong: list[tuple[Any, Any, str]] = [
        (swapped, "Alpha", "not a valid one"),
        (citation, 5, "holds a Citation and its exact text"),
        (None, "Alpha", "holds a Citation and its exact text"),
        (citation, "Alp", "its exact text has 3 characters"),
    ]
    for held, exact, message in wrong:
        with pytest.raises(ReceiptError, match=f"^receipt 2: .*{message}") as caught:
            await check_receipts([Receipt(citation, "Alpha"), Receipt(held, exact)], tmp_path)
        assert caught.value.number == 2
    [checked] = await check_receipts([Receipt(citation, "Alpha")], tmp_path)
    assert checked.ok


async def test_writing_receipts_replaces_the_file_whole(tmp_path: Path) -> None:
    """The old file stays whole until the new one is complete: a write that fails
    leaves it, and no temporary file, behind."""
    path = tmp_path / "receipts.jsonl"
    await write_receipts(path, [_good()])
    before = path.read_bytes()
    (tmp_path / "sub").mkdir()
    with pytest.raises(ConfigurationError, match="cannot write receipts file"):
        await write_receipts(tmp_path / "sub", [_good()])  # a directory cannot be replaced
    assert [p.name for p in (tmp_path / "sub").iterdir()] == []
    assert path.read_bytes() == before
    await write_receipts(path, [_good(), _good()])
    assert len(await read_receipts(path)) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["receipts.jsonl", "sub"]


# -- links -------------------------------------------------------------------------


def _at(source: str, source_class: Any, **fields: Any) -> Citation:
    given = {"document_id": "d", "chunk_id": "c", "extractor": None, "end_offset": 10}
    return Citation(source=source, source_class=source_class, start_offset=0, **given | fields)


def test_text_directive_encoding_escapes_its_delimiters() -> None:
    assert encode_directive_part("a-b, c&d") == "a%2Db%2C%20c%26d"
    assert text_directive("start", "end", prefix="pre", suffix="post") == (
        "text=pre-,start,end,-post"
    )
    assert text_directive("-x-", suffix="-y") == "text=%2Dx%2D,-%2Dy"
    with pytest.raises(ValueError, match="cannot be empty"):
        text_directive("")


# Any text a decoded source can hold: no lone surrogates.
_TEXT = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=40)


@given(_TEXT)
def test_encoding_decodes_back_to_the_text(text: str) -> None:
    encoded = encode_directive_part(text)
    assert unquote(encoded) == text
    assert not set("-&,#% ") & set(encoded.replace("%", ""))


@given(_TEXT, st.none() | _TEXT, st.none() | _TEXT, st.none() | _TEXT)
def test_a_directive_parses_back_to_its_parts(
    start: str, end: str | None, prefix: str | None, suffix: str | None
) -> None:
    link = "https://example.org/page#:~:" + text_directive(start, end, prefix=prefix, suffix=suffix)
    assert parse_text_directive(link) == TextDirective(start, end, prefix=prefix, suffix=suffix)


def test_url_citations_link_to_the_passage() -> None:
    url = "https://example.org/a-b?q=1"
    short = _at(url, "snapshot", end_offset=22)
    link = short.link("Tea, milk & sugar-free")
    assert link == "https://example.org/a-b?q=1#:~:text=Tea%2C%20milk%20%26%20sugar%2Dfree"
    assert parse_text_directive(link or "") == TextDirective("Tea, milk & sugar-free")
    # A page's own fragment stays; the directive follows it.
    assert _at(url + "#intro", "snapshot").link("Tea time") == url + "#intro:~:text=Tea%20time"
    # A long passage is linked by its first and last words, whitespace collapsed.
    words = " ".join(f"w{i}" for i in range(30))
    long = _at(url, "snapshot", end_offset=len(words) + 2).link(f"{words}\n\n")
    assert parse_text_directive(long or "") == TextDirective(
        "w0 w1 w2 w3 w4", "w25 w26 w27 w28 w29"
    )
    assert short.link() == url
    assert short.link("  \n") == url
    assert _at("notes.txt", "text").link("Tea") is None
    assert _at("record://t-1", "record").link("Tea") is None
    annotation = short.to_annotation("Tea, milk & sugar-free")
    assert annotation["target"]["groundkit:link"] == link


def test_pdf_citations_link_to_their_page() -> None:
    pdf = _at("reports/Q3 #2.pdf", "extracted", extractor="pypdf/6.0.0", page=3, end_page=4)
    assert pdf.link("anything") == f"{quote('reports/Q3 #2.pdf')}#page=3"
    assert pdf.link() == "reports/Q3%20%232.pdf#page=3"
    target = pdf.to_annotation("0123456789")["target"]
    assert target["groundkit:link"] == "reports/Q3%20%232.pdf#page=3"
    assert (target["groundkit:page"], target["groundkit:endPage"]) == (3, 4)
    assert target["groundkit:extractor"] == "pypdf/6.0.0"
    # A PDF fetched from a URL: its own fragment gives way to the page.
    online = _at("https://example.org/r.pdf#top", "snapshot", page=2)
    assert online.link("Tea") == "https://example.org/r.pdf#page=2"
    # Pages of other extracted formats (slides, chapters) are not PDF pages.
    slides = _at("deck.pptx", "extracted", extractor="groundkit-pptx/1+python-pptx/1", page=2)
    assert slides.link("Tea") is None


async def test_a_pdf_receipt_is_checked_by_re_extraction(tmp_path: Path) -> None:
    pytest.importorskip("pypdf")
    pytest.importorskip("fpdf")
    from tests.sources import PAGES, make_pdf

    base = tmp_path / "corpus"
    write_tree(base, {"report.pdf": make_pdf()})
    chunking = ChunkingConfig(max_chars=120, overlap_chars=0)
    async with Collection.open(tmp_path / "index", base_dir=base, chunking=chunking) as col:
        await col.ingest(base)
        (result,) = (await col.search("geothermal", 1)).results
    assert PAGES[3].split()[0] in result.content
    target = result.to_annotation()["target"]
    assert target["groundkit:link"] == f"report.pdf#page={len(PAGES)}"
    assert target["groundkit:extractor"] == result.extractor
    (checked,) = await check_receipts([result.to_annotation()], base)
    assert checked.verification == "verified"
    (base / "report.pdf").write_bytes(make_pdf(PAGES[:3]))
    (checked,) = await check_receipts([result.to_annotation()], base)
    assert checked.verification == "drifted"


async def test_concurrent_writes_of_one_receipts_file_leave_one_of_them_whole(
    tmp_path: Path,
) -> None:
    path = tmp_path / "receipts.jsonl"
    batches = [[_good()] * n for n in range(1, 9)]
    await asyncio.gather(*(write_receipts(path, batch) for batch in batches))
    assert len(await read_receipts(path)) in range(1, 9)
    assert [p.name for p in tmp_path.iterdir()] == ["receipts.jsonl"]
