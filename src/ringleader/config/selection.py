"""Which ranks a feature looks at (shown output, metrics)."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ringleader.core.errors import ConfigError


@dataclass(frozen=True)
class RankSelection:
    """Which ranks a feature looks at: all of them, or the listed ones."""

    ranks: frozenset[int] | None  # None: every rank

    def __contains__(self, rank: object) -> bool:
        return self.ranks is None or rank in self.ranks

    @classmethod
    def parse(cls, field: str, value: Any) -> "RankSelection":
        """ "all", one rank (0 or "0"), a comma list ("0,3") or a JSON list ([0, 3])."""
        if isinstance(value, str) and value.strip().lower() == "all":
            return cls(None)
        items: Sequence[Any]
        if isinstance(value, list):
            items = value
        elif isinstance(value, int) and not isinstance(value, bool):
            items = [value]
        elif isinstance(value, str):
            items = [item.strip() for item in value.split(",") if item.strip()]
        else:
            items = []
        ranks = set()
        for item in items:
            text = str(item)
            if isinstance(item, bool) or not text.isdigit() or not text.isascii():
                items = []
                break
            ranks.add(int(text))
        if not items:
            raise ConfigError(field, f'expected "all", a rank or a list of ranks, got {value!r}')
        return cls(frozenset(ranks))

    def union(self, other: "RankSelection") -> "RankSelection":
        if self.ranks is None or other.ranks is None:
            return ALL_RANKS
        return RankSelection(self.ranks | other.ranks)

    def __str__(self) -> str:
        """The text parse() reads back: "all" or "0,3"."""
        return "all" if self.ranks is None else ",".join(map(str, sorted(self.ranks)))


ALL_RANKS = RankSelection(None)
RANK_ZERO = RankSelection(frozenset({0}))
