"""Hourly prices of instance types: a small bundled table (prices.json, with its date) and
`--price TYPE=USD_PER_HOUR`, which wins.

A `--price` must name an instance type one of the compared runs ran on: a price nobody uses
is a typo (`p3.16xlarg`) or a run whose type is unknown, and either way the user should hear
of it rather than read a table without the cost they asked for.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources

from ringleader.tools.report.compare_model import Price

TABLE_FILE = "prices.json"
GIVEN = "--price"


class PriceError(ValueError):
    """A --price item is malformed or names no run's instance type (exit code 2)."""


@dataclass(frozen=True)
class PriceTable:
    as_of: str
    what: str
    usd_per_hour: Mapping[str, float]

    @property
    def source(self) -> str:
        return f"bundled table ({self.as_of})"


def bundled_table() -> PriceTable:
    text = resources.files(__package__).joinpath(TABLE_FILE).read_text(encoding="utf-8")
    data = json.loads(text)
    return PriceTable(
        str(data["as_of"]),
        str(data["what"]),
        {str(k): float(v) for k, v in data["usd_per_hour"].items()},
    )


def parse_price(item: str) -> tuple[str, float]:
    """`p3.16xlarge=24.48` -> ("p3.16xlarge", 24.48)."""
    name, sep, value = item.partition("=")
    try:
        price = float(value) if sep and name else math.nan
    except ValueError:
        price = math.nan
    if not math.isfinite(price) or price < 0:
        raise PriceError(
            f"{GIVEN} {item}: expected INSTANCE_TYPE=USD_PER_HOUR with a number of dollars "
            "per hour, e.g. p3.16xlarge=24.48"
        )
    return name.strip(), price


def resolve_prices(
    items: Sequence[str], instance_types: Iterable[str | None], table: PriceTable
) -> dict[str, Price]:
    """The price of every instance type the runs ran on that has one: --price first, else the
    bundled table."""
    types = sorted({kind for kind in instance_types if kind})
    given = dict(parse_price(item) for item in items)
    unknown = [name for name in given if name not in types]
    if unknown:
        runs_on = ", ".join(types) if types else "no instance type known (see --instance-type)"
        raise PriceError(
            f"{GIVEN} {unknown[0]}={given[unknown[0]]:g}: no run ran on {unknown[0]}; "
            f"expected one of the runs' instance types: {runs_on}"
        )
    prices = {}
    for kind in types:
        if kind in given:
            prices[kind] = Price(given[kind], GIVEN)
        elif kind in table.usd_per_hour:
            prices[kind] = Price(table.usd_per_hour[kind], table.source)
    return prices
