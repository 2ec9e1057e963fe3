"""An immutable mapping, and set, whose change copies only a small part of it.

A frozen state machine's per-rank tables (which ranks started, their records, their progress)
change one rank at a time: a job of 8,192 ranks changes them 16,000 times or more. Copying a
whole dict each time would cost the leader O(ranks) per event; a PMap keeps its entries in
BUCKETS small dicts and a change copies the bucket list and the one bucket it touches. The
per-host sets (who still owes a hello, a confirmation) are PSets, for the same reason: copying
a frozenset at each of 1,024 hosts' byes made the verdict's confirmations quadratic.
"""

from collections.abc import Hashable, Iterable, Iterator, Mapping, Set
from typing import TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

BUCKETS = 64  # a change copies 64 bucket references and one bucket of len/64 entries
# Neighbouring ints share a bucket (a host's ranks are neighbours: its progress report or its
# ranks' ends change one bucket, not eight).
RUN = 16


def _bucket(key: object) -> int:
    return (hash(key) // RUN) % BUCKETS


_EMPTY: dict[object, object] = {}


class PMap(Mapping[K, V]):
    """Read like a Mapping; `set` and `update` return a new PMap and leave this one as it is.
    Iteration order is not insertion order: sort where order matters."""

    __slots__ = ("_buckets", "_size")
    _buckets: tuple[dict[K, V], ...]
    _size: int

    def __init__(self, items: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        buckets: list[dict[K, V]] = [_EMPTY for _ in range(BUCKETS)]  # type: ignore[misc]
        pairs = items.items() if isinstance(items, Mapping) else items
        for key, value in pairs:
            index = _bucket(key)
            if buckets[index] is _EMPTY:
                buckets[index] = {}
            buckets[index][key] = value
        self._buckets = tuple(buckets)
        self._size = sum(len(bucket) for bucket in buckets)

    @classmethod
    def _of(cls, buckets: tuple[dict[K, V], ...], size: int) -> "PMap[K, V]":
        made = cls.__new__(cls)
        made._buckets, made._size = buckets, size
        return made

    def __getitem__(self, key: K) -> V:
        return self._buckets[_bucket(key)][key]

    def __contains__(self, key: object) -> bool:
        return key in self._buckets[_bucket(key)]

    def __iter__(self) -> Iterator[K]:
        for bucket in self._buckets:
            yield from bucket

    def __len__(self) -> int:
        return self._size

    def __repr__(self) -> str:
        return f"PMap({dict(self.items())!r})"

    def set(self, key: K, value: V) -> "PMap[K, V]":
        index = _bucket(key)
        buckets = list(self._buckets)
        bucket = buckets[index] = dict(buckets[index])
        size = self._size + (key not in bucket)
        bucket[key] = value
        return self._of(tuple(buckets), size)

    def update(self, pairs: Iterable[tuple[K, V]]) -> "PMap[K, V]":
        buckets = list(self._buckets)
        copied: set[int] = set()
        size = self._size
        for key, value in pairs:
            index = _bucket(key)
            if index not in copied:
                buckets[index] = dict(buckets[index])
                copied.add(index)
            bucket = buckets[index]
            size += key not in bucket
            bucket[key] = value
        return self._of(tuple(buckets), size) if copied else self

    def delete(self, key: K) -> "PMap[K, V]":
        """Without `key`; this very PMap when it has no such key."""
        index = _bucket(key)
        if key not in self._buckets[index]:
            return self
        buckets = list(self._buckets)
        bucket = buckets[index] = dict(buckets[index])
        del bucket[key]
        return self._of(tuple(buckets), self._size - 1)


class PSet(Set[K]):
    """Read like a frozenset (its operators give PSets); `add` and `discard` return a new PSet
    and leave this one as it is."""

    __slots__ = ("_members",)
    _members: PMap[K, None]

    def __init__(self, items: Iterable[K] = ()) -> None:
        self._members = PMap((item, None) for item in items)

    @classmethod
    def _with(cls, members: PMap[K, None]) -> "PSet[K]":
        made = cls.__new__(cls)
        made._members = members
        return made

    def __contains__(self, item: object) -> bool:
        return item in self._members

    def __iter__(self) -> Iterator[K]:
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)

    def __repr__(self) -> str:
        return f"PSet({set(self)!r})"

    def add(self, item: K) -> "PSet[K]":
        return self if item in self._members else self._with(self._members.set(item, None))

    def discard(self, item: K) -> "PSet[K]":
        members = self._members.delete(item)
        return self if members is self._members else self._with(members)
