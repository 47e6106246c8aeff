"""A conformance suite any store of lexical-index packs must pass (``PackStore``).

Subclass it with a ``Test*`` class that provides a ``pack_store`` fixture
yielding a fresh, empty store, and the two hooks that reach the bytes the store
keeps for a pack (where ``load_pack`` reads them from)::

    class TestMyPacks(PackStoreConformance):
        @pytest.fixture
        def pack_store(self, tmp_path): ...

        async def stored_bytes(self, pack_store, name): ...
        async def replace_stored(self, pack_store, name, data): ...

The suite pins groundkit's pack format and entries: ``write_pack`` returns
``{"name", "bytes", "xxh3"}``, the size and xxh3-64 of the pack as stored, so a
pack can move between stores and every store refuses the same damage. Any
damage is a ``StorageError``, never a numpy or JSON error, and never a mapped
array. ``remove_unreferenced`` is tested on both sides of the grace period:
``let_grace_pass`` sets the store's ``grace_seconds`` to 0 unless overridden.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import xxhash

from groundkit.errors import StorageError
from groundkit.storage.segments import PackStore

__all__ = ["DTYPES", "PackStoreConformance", "make_arrays"]

Packs = Any  # a PackStore implementation

# Every dtype a pack may hold, as numpy spells it in little-endian order.
DTYPES = ("<i4", "<i8", "<u2", "<u4", "<u8", "<f8", "|u1", "|b1")
_MAGIC = b"GRKPACK1"
_BAD_NAMES = ("../escape", "a/b", ".hidden", "", "x" * 300, "a\\b", "a\0b", "a.b", "-lead")


def make_arrays() -> dict[str, npt.NDArray[Any]]:
    """One array of every allowed dtype with edge values, an empty one of each, and a
    two-dimensional one."""
    arrays: dict[str, npt.NDArray[Any]] = {}
    for code in DTYPES:
        dtype = np.dtype(code)
        if dtype.kind == "b":
            values = np.array([True, False, True], dtype=dtype)
        elif dtype.kind == "f":
            values = np.array([0.0, -1.5, np.inf, -np.inf, np.nan, 1e300], dtype=dtype)
        else:
            info = np.iinfo(dtype)
            values = np.array([info.min, 0, 1, info.max], dtype=dtype)
        arrays[f"v{code[1:]}"] = values
        arrays[f"empty{code[1:]}"] = np.zeros(0, dtype=dtype)
    arrays["grid"] = np.arange(12, dtype=np.int64).reshape(3, 4)
    return arrays


META = {"docs": 3, "nested": {"list": [1, 2.5, "x", None, True]}, "text": "Gezeiten – 🌊"}


def _manifest_checksum(body: dict[str, Any]) -> str:
    """The manifest's own checksum, as the format defines it: xxh3-64 of the body as
    compact JSON with sorted keys."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return str(xxhash.xxh3_64_hexdigest(canonical.encode("utf-8")))


def _same(got: npt.NDArray[Any], want: npt.NDArray[Any]) -> bool:
    return (
        got.dtype.str == want.dtype.str
        and got.shape == want.shape
        and bool(np.array_equal(got, want, equal_nan=want.dtype.kind == "f"))
    )


def _header(data: bytes) -> tuple[dict[str, Any], int]:
    length = int.from_bytes(data[8:16], "little")
    return json.loads(data[16 : 16 + length]), length


def _with_header(data: bytes, change: Callable[[dict[str, Any]], None]) -> bytes:
    """``data`` with its header changed in place, padded to the same length so the
    arrays stay where they were (the change must not lengthen the header)."""
    header, length = _header(data)
    change(header)
    text = json.dumps(header, sort_keys=True).encode("utf-8")
    assert len(text) <= length, "a header change may not make it longer"
    return data[:16] + text + b" " * (length - len(text)) + data[16 + length :]


# The header changes below empty the meta first, which leaves room for longer values.
def _far_offset(header: dict[str, Any]) -> None:
    header["meta"] = {}
    header["arrays"]["vi8"]["offset"] = 10**6


def _unknown_dtype(header: dict[str, Any]) -> None:
    header["arrays"]["vi8"]["dtype"] = "<f2"


def _negative_shape(header: dict[str, Any]) -> None:
    header["meta"] = {}
    header["arrays"]["vi8"]["shape"] = [-4]


def _no_meta(header: dict[str, Any]) -> None:
    del header["meta"]


def _list_table(header: dict[str, Any]) -> None:
    header["arrays"] = []


# Damage whose size and checksum the entry is then made to agree with: only the
# reading of the pack itself can catch it.
_CONSISTENT_DAMAGE: dict[str, Callable[[bytes], bytes]] = {
    "empty": lambda data: b"",
    "shorter than the magic": lambda data: data[:5],
    "bad magic": lambda data: b"NOTAPACK" + data[8:],
    "header length past the end": lambda data: (
        data[:8] + (len(data) * 2).to_bytes(8, "little") + data[16:]
    ),
    "header not JSON": lambda data: data[:16] + b"{" * 8 + data[24:],
    "array past the end": lambda data: _with_header(data, _far_offset),
    "unknown dtype": lambda data: _with_header(data, _unknown_dtype),
    "negative shape": lambda data: _with_header(data, _negative_shape),
    "no meta": lambda data: _with_header(data, _no_meta),
    "array table not a mapping": lambda data: _with_header(data, _list_table),
    "arrays cut off": lambda data: data[: len(data) // 2],
}


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1 :]


# Damage to what is stored while the entry still describes the pack as written.
_DAMAGE: dict[str, Callable[[bytes], bytes]] = {
    "truncated by a byte": lambda data: data[:-1],
    "truncated by half": lambda data: data[: len(data) // 2],
    "the middle byte flipped": lambda data: _flip(data, len(data) // 2),
    # The last byte is padding: only the checksum can tell.
    "the last byte flipped": lambda data: _flip(data, len(data) - 1),
    "a byte appended": lambda data: data + b"\0",
    "emptied": lambda data: b"",
}


class PackStoreConformance:
    """Behaviour shared by every pack store."""

    # -- hooks the subclass provides ----------------------------------------------------

    async def stored_bytes(self, pack_store: Packs, name: str) -> bytes:
        """The bytes the store keeps for pack ``name``."""
        raise NotImplementedError("override stored_bytes to run the damage tests")

    async def replace_stored(self, pack_store: Packs, name: str, data: bytes) -> None:
        """Make the store keep ``data`` for pack ``name`` (as damage would), so that the
        next ``load_pack`` reads them (drop any copy it would otherwise serve)."""
        raise NotImplementedError("override replace_stored to run the damage tests")

    async def replace_manifest(self, pack_store: Packs, data: bytes) -> None:
        """Make the store keep ``data`` as its manifest (as an edit by hand would)."""
        raise NotImplementedError("override replace_manifest to run the manifest damage tests")

    def let_grace_pass(self, pack_store: Packs) -> None:
        """Make every existing unreferenced pack old enough for ``remove_unreferenced``."""
        pack_store.grace_seconds = 0.0

    # -- round trips -----------------------------------------------------------------------

    async def test_satisfies_the_protocol(self, pack_store: Packs) -> None:
        assert isinstance(pack_store, PackStore)
        assert isinstance(pack_store.location, str) and pack_store.location

    async def test_every_dtype_round_trips(self, pack_store: Packs) -> None:
        arrays = make_arrays()
        entry = await pack_store.write_pack("seg-1", arrays, META)
        assert set(entry) == {"name", "bytes", "xxh3"} and entry["name"] == "seg-1"
        loaded, meta = await pack_store.load_pack(entry)
        assert meta == META
        assert set(loaded) == set(arrays)
        for key, want in arrays.items():
            assert _same(loaded[key], want), key

    async def test_a_pack_without_arrays_round_trips(self, pack_store: Packs) -> None:
        entry = await pack_store.write_pack("ov-0", {}, {})
        assert await pack_store.load_pack(entry) == ({}, {})

    async def test_big_endian_input_comes_back_little_endian(self, pack_store: Packs) -> None:
        entry = await pack_store.write_pack("seg-be", {"x": np.arange(5, dtype=">i4")}, {})
        loaded, _ = await pack_store.load_pack(entry)
        assert _same(loaded["x"], np.arange(5, dtype="<i4"))

    async def test_a_dtype_packs_cannot_hold_is_refused(self, pack_store: Packs) -> None:
        with pytest.raises(ValueError):
            await pack_store.write_pack("seg-f4", {"x": np.zeros(3, np.float32)}, {})

    async def test_arrays_are_read_only(self, pack_store: Packs) -> None:
        entry = await pack_store.write_pack("seg-ro", make_arrays(), {})
        loaded, _ = await pack_store.load_pack(entry)
        for key, array in loaded.items():
            assert not array.flags.writeable, key
        with pytest.raises(ValueError):
            loaded["vi8"][0] = 7

    async def test_the_entry_describes_the_stored_pack(self, pack_store: Packs) -> None:
        entry = await pack_store.write_pack("seg-e", make_arrays(), META)
        data = await self.stored_bytes(pack_store, "seg-e")
        assert data.startswith(_MAGIC)
        assert entry["bytes"] == len(data)
        assert entry["xxh3"] == xxhash.xxh3_64_hexdigest(data)

    async def test_concurrent_loads_agree(self, pack_store: Packs) -> None:
        arrays = make_arrays()
        entry = await pack_store.write_pack("seg-c", arrays, META)
        results = await asyncio.gather(*(pack_store.load_pack(entry) for _ in range(4)))
        for loaded, meta in results:
            assert meta == META and all(_same(loaded[k], v) for k, v in arrays.items())

    # -- the manifest ----------------------------------------------------------------------

    async def test_no_manifest_reads_as_none(self, pack_store: Packs) -> None:
        assert await pack_store.read_manifest() is None

    async def test_the_manifest_is_replaced_whole(self, pack_store: Packs) -> None:
        first = {"format": 1, "generation": 3, "parts": [{"segment": {"name": "a"}}]}
        second = {"format": 1, "generation": 4, "parts": [], "note": "Gezeiten 🌊"}
        await pack_store.write_manifest(first)
        assert await pack_store.read_manifest() == first
        await pack_store.write_manifest(second)
        assert await pack_store.read_manifest() == second

    @pytest.mark.parametrize("edit", ["body", "checksum", "no checksum"])
    async def test_an_edited_manifest_is_a_storage_error(
        self, pack_store: Packs, edit: str
    ) -> None:
        await pack_store.write_manifest({"format": 1, "generation": 3, "max_key": 9, "parts": []})
        stored = {"format": 1, "generation": 3, "max_key": 0, "parts": []}  # max_key edited
        if edit != "no checksum":
            right = {"format": 1, "generation": 3, "max_key": 9, "parts": []}
            stored["body_xxh3"] = _manifest_checksum(right if edit == "body" else stored) + (
                "0" if edit == "checksum" else ""
            )
        await self.replace_manifest(pack_store, json.dumps(stored).encode("utf-8"))
        with pytest.raises(StorageError):
            await pack_store.read_manifest()

    # -- damage ----------------------------------------------------------------------------

    async def test_changed_packs_names_a_pack_cut_short(self, pack_store: Packs) -> None:
        entry = await pack_store.write_pack("seg-c", make_arrays(), META)
        kept = await pack_store.write_pack("seg-k", make_arrays(), META)
        assert pack_store.changed_packs([entry, kept]) == []
        data = await self.stored_bytes(pack_store, "seg-c")
        await self.replace_stored(pack_store, "seg-c", data[: len(data) // 2])
        assert pack_store.changed_packs([entry, kept]) == ["seg-c"]

    @pytest.mark.parametrize("damage", sorted(_DAMAGE))
    async def test_damaged_packs_are_storage_errors(self, pack_store: Packs, damage: str) -> None:
        entry = await pack_store.write_pack("seg-d", make_arrays(), META)
        data = await self.stored_bytes(pack_store, "seg-d")
        await self.replace_stored(pack_store, "seg-d", _DAMAGE[damage](data))
        with pytest.raises(StorageError):
            await pack_store.load_pack(entry)

    @pytest.mark.parametrize("damage", sorted(_CONSISTENT_DAMAGE))
    async def test_damage_behind_a_matching_checksum_is_caught(
        self, pack_store: Packs, damage: str
    ) -> None:
        await pack_store.write_pack("seg-h", make_arrays(), META)
        data = _CONSISTENT_DAMAGE[damage](await self.stored_bytes(pack_store, "seg-h"))
        await self.replace_stored(pack_store, "seg-h", data)
        entry = {"name": "seg-h", "bytes": len(data), "xxh3": xxhash.xxh3_64_hexdigest(data)}
        with pytest.raises(StorageError):
            await pack_store.load_pack(entry)

    @pytest.mark.parametrize("wrong", ["bytes+1", "bytes-1", "xxh3"])
    async def test_an_entry_that_disagrees_is_a_storage_error(
        self, pack_store: Packs, wrong: str
    ) -> None:
        entry = await pack_store.write_pack("seg-w", make_arrays(), META)
        if wrong == "xxh3":
            wrong_entry = {**entry, "xxh3": "0" * 16}
        else:
            wrong_entry = {**entry, "bytes": entry["bytes"] + (1 if wrong == "bytes+1" else -1)}
        with pytest.raises(StorageError):
            await pack_store.load_pack(wrong_entry)
        assert (await pack_store.load_pack(entry))[1] == META  # the pack itself is whole

    async def test_a_missing_pack_is_a_storage_error(self, pack_store: Packs) -> None:
        with pytest.raises(StorageError):
            await pack_store.load_pack({"name": "seg-none", "bytes": 64, "xxh3": "0" * 16})

    @pytest.mark.parametrize("bad", _BAD_NAMES)
    async def test_malformed_names_are_refused(self, pack_store: Packs, bad: str) -> None:
        with pytest.raises(StorageError):
            await pack_store.load_pack({"name": bad, "bytes": 64, "xxh3": "0" * 16})
        with pytest.raises(ValueError):
            await pack_store.write_pack(bad, {"x": np.zeros(2, np.int64)}, {})

    @pytest.mark.parametrize(
        "entry",
        [
            {},
            {"name": 5, "bytes": 64, "xxh3": "0"},
            {"name": "seg-x", "xxh3": "0"},
            {"name": "seg-x", "bytes": "64", "xxh3": "0"},
            {"name": "seg-x", "bytes": True, "xxh3": "0"},
            {"name": "seg-x", "bytes": -1, "xxh3": "0"},
            {"name": "seg-x", "bytes": 64},
        ],
    )
    async def test_malformed_entries_are_refused(
        self, pack_store: Packs, entry: dict[str, Any]
    ) -> None:
        await pack_store.write_pack("seg-x", {"x": np.zeros(2, np.int64)}, {})
        with pytest.raises(StorageError):
            await pack_store.load_pack(entry)

    # -- housekeeping ----------------------------------------------------------------------

    async def test_remove_unreferenced_keeps_named_and_young_packs(self, pack_store: Packs) -> None:
        manifest = {"format": 1, "generation": 1, "parts": []}
        await pack_store.write_manifest(manifest)
        entries = {
            name: await pack_store.write_pack(name, {"x": np.arange(3, dtype=np.int64)}, {})
            for name in ("seg-a", "seg-b", "ov-c")
        }
        assert await pack_store.remove_unreferenced(["seg-a"]) == 0  # all still young
        for entry in entries.values():
            await pack_store.load_pack(entry)
        self.let_grace_pass(pack_store)
        assert await pack_store.remove_unreferenced(["seg-a"]) == 2
        assert await pack_store.remove_unreferenced(["seg-a"]) == 0
        loaded, _ = await pack_store.load_pack(entries["seg-a"])
        assert _same(loaded["x"], np.arange(3, dtype=np.int64))
        assert await pack_store.read_manifest() == manifest

    async def test_clear_removes_packs_and_manifest(self, pack_store: Packs) -> None:
        entry = await pack_store.write_pack("seg-k", {"x": np.arange(3, dtype=np.int64)}, {})
        await pack_store.write_manifest({"generation": 1, "parts": [{"segment": entry}]})
        await pack_store.clear()
        assert await pack_store.read_manifest() is None
        with pytest.raises(StorageError):
            await pack_store.load_pack(entry)
        await pack_store.clear()  # clearing an empty store is fine
        again = await pack_store.write_pack("seg-k2", {"x": np.arange(2, dtype=np.int64)}, {})
        assert (await pack_store.load_pack(again))[0]["x"].tolist() == [0, 1]

    async def test_writer_lock_excludes_a_second_holder(self, pack_store: Packs) -> None:
        async with pack_store.writer_lock() as held:
            assert held is True
            async with pack_store.writer_lock(wait=False) as other:
                assert other is False
        async with pack_store.writer_lock(wait=False) as after:
            assert after is True

    async def test_writer_lock_is_released_by_a_failing_holder(self, pack_store: Packs) -> None:
        with pytest.raises(RuntimeError):
            async with pack_store.writer_lock() as held:
                assert held
                raise RuntimeError("the holder failed")
        async with pack_store.writer_lock(wait=False) as after:
            assert after is True
