"""The load journal's file format and what it remembers across a restart (a fresh LoadJournal on the file)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ensemble_runtime.load_journal import JournalKey, LoadJournal, decode, encode


def test_encode_decode_round_trip() -> None:
    keys = {JournalKey("m", 2, "abc"), JournalKey("n", 1, "def")}
    assert decode(encode(keys)) == keys


@pytest.mark.parametrize("data", [b"", b"[]", b'{"loading": {}}', b'{"loading": [{"model": "m"}]}', b'{"loading": [1]}'])
def test_decode_refuses_what_is_not_a_journal(data: bytes) -> None:
    with pytest.raises(ValueError):
        decode(data)


def test_a_load_left_open_is_what_died_after_the_restart(tmp_path: Path) -> None:
    path = tmp_path / "cache" / "load-journal"
    first = LoadJournal(path)
    first.begin("m", 1, "a")
    first.end("m", 1, "a")
    first.begin("m", 2, "b")  # the process dies here
    after = LoadJournal(path)
    assert after.died("m", 2, "b") and after.any_died("m")
    assert not after.died("m", 1, "a") and not after.died("m", 2, "other") and not after.any_died("n")
    after.begin("n", 1, "c")  # another load, and another crash: version 2 of m is still remembered
    assert LoadJournal(path).died("m", 2, "b")
    again = LoadJournal(path)
    again.begin("m", 2, "fixed")  # new content under the same number: the old crash no longer applies
    again.end("m", 2, "fixed")
    assert not LoadJournal(path).any_died("m")


def test_an_unreadable_journal_counts_as_empty(tmp_path: Path) -> None:
    path = tmp_path / "load-journal"
    path.write_bytes(b"\x00garbage")
    journal = LoadJournal(path)
    assert not journal.any_died("m")
    journal.begin("m", 1, "a")  # and it is rewritten whole
    assert LoadJournal(path).died("m", 1, "a")
