"""The per-process cache of what was read from immutable files (firn.io.file_cache)."""

from __future__ import annotations

import threading

import pytest

from firn.io.file_cache import FileCache


def _reader(log: list[str], name: str, value: bytes):  # type: ignore[no-untyped-def]
    def read() -> bytes:
        log.append(name)
        return value

    return read


def test_a_hit_does_not_read_again_and_the_least_recently_used_goes_first() -> None:
    cache: FileCache[bytes] = FileCache(capacity=100)
    reads: list[str] = []
    for name in ("a", "b", "c", "a"):
        cache.get_or_read(name, _reader(reads, name, b"x" * 25), len)
    assert reads == ["a", "b", "c"]
    assert (cache.hits, cache.misses, cache.size_bytes) == (1, 3, 75)
    # Two more: 125 bytes passes 100, so the least recently used (b, not a) leaves.
    cache.get_or_read("d", _reader(reads, "d", b"x" * 25), len)
    cache.get_or_read("e", _reader(reads, "e", b"x" * 25), len)
    assert (cache.size_bytes, len(cache)) == (100, 4)
    cache.get_or_read("a", _reader(reads, "a", b"?"), len)
    cache.get_or_read("b", _reader(reads, "b", b"x" * 25), len)
    assert reads == ["a", "b", "c", "d", "e", "b"]


def test_a_value_over_a_quarter_of_the_capacity_is_returned_but_not_kept() -> None:
    cache: FileCache[bytes] = FileCache(capacity=100)
    reads: list[str] = []
    small = cache.get_or_read("small", _reader(reads, "small", b"s" * 25), len)
    big = cache.get_or_read("big", _reader(reads, "big", b"b" * 26), len)
    assert (small, big) == (b"s" * 25, b"b" * 26)
    cache.get_or_read("big", _reader(reads, "big", b"b" * 26), len)
    cache.get_or_read("small", _reader(reads, "small", b"?"), len)
    assert reads == ["small", "big", "big"]
    assert cache.size_bytes == 25


def test_a_failed_read_keeps_nothing() -> None:
    cache: FileCache[bytes] = FileCache(capacity=100)

    def broken() -> bytes:
        raise OSError("gone")

    for _ in range(2):
        with pytest.raises(OSError, match="gone"):
            cache.get_or_read("f", broken, len)
    assert (cache.misses, len(cache)) == (2, 0)


def test_threads_share_it_and_the_bytes_stay_within_capacity() -> None:
    cache: FileCache[bytes] = FileCache(capacity=1000)

    def work(offset: int) -> None:
        for i in range(500):
            key = (offset + i) % 60
            value = cache.get_or_read(key, lambda k=key: bytes([k % 256]) * 20, len)
            assert value == bytes([key % 256]) * 20

    threads = [threading.Thread(target=work, args=(n * 7,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cache.size_bytes <= 1000
    assert cache.size_bytes == 20 * len(cache)
    assert cache.hits + cache.misses == 2000
