"""Horovod's autotune log, parsed (pure).

Rank 0 writes it (horovod/common/parameter_manager.cc) when HOROVOD_AUTOTUNE_LOG is set: a
header naming the tunable parameters, then one row per scored sample, and the last column is
`score`, the bytes processed per microsecond (MB/s) in that sample. Horovod 0.28 writes
`hierarchical_allreduce,hierarchical_allgather,torus_allreduce,cache_enabled,cycle_time_ms,
tensor_fusion_threshold,score` (flags as 0/1, and a stray space after the third comma); older
versions have fewer parameters, so the columns are read from the header. When tuning
finishes, Horovod appends the best parameters and their score as one more row; when that row
repeats an earlier sample with the best score, it is not counted as a sample of its own.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass

SCORE = "score"


class AutotuneError(ValueError):
    """The file is not an autotune log."""


@dataclass(frozen=True)
class Sample:
    index: int  # 1-based, in the order Horovod scored them
    params: tuple[tuple[str, str], ...]  # (parameter, value) in header order
    score: float


@dataclass(frozen=True)
class AutotuneLog:
    parameters: tuple[str, ...]
    samples: tuple[Sample, ...]
    finished: bool  # the log ends with Horovod's best-parameters row
    skipped_rows: int  # rows that did not fit the header

    @property
    def best(self) -> Sample | None:
        if not self.samples:
            return None
        return max(self.samples, key=lambda sample: (sample.score, -sample.index))


def parse_autotune(text: str) -> AutotuneLog:
    rows = [[cell.strip() for cell in row] for row in csv.reader(text.splitlines()) if row]
    if not rows:
        raise AutotuneError("the file is empty")
    header = rows[0]
    if SCORE not in header:
        raise AutotuneError(f"no {SCORE!r} column in its header {','.join(header)!r}")
    score_at = header.index(SCORE)
    parameters = tuple(name for i, name in enumerate(header) if i != score_at)
    parsed: list[tuple[tuple[tuple[str, str], ...], float, tuple[str, ...]]] = []
    skipped = 0
    for row in rows[1:]:
        score = _float(row[score_at]) if len(row) == len(header) else None
        if score is None:
            skipped += 1
            continue
        values = tuple(_tidy(cell) for i, cell in enumerate(row) if i != score_at)
        parsed.append((tuple(zip(parameters, values, strict=True)), score, tuple(row)))
    finished = (
        len(parsed) >= 2
        and parsed[-1][1] == max(score for _, score, _ in parsed)
        and any(earlier[2] == parsed[-1][2] for earlier in parsed[:-1])
    )
    if finished:
        parsed.pop()
    samples = tuple(
        Sample(index, params, score) for index, (params, score, _) in enumerate(parsed, 1)
    )
    return AutotuneLog(parameters, samples, finished, skipped)


def _float(cell: str) -> float | None:
    try:
        value = float(cell)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _tidy(cell: str) -> str:
    """Horovod prints doubles with C++ stream defaults; show 4.0 as 4 and keep 0/1 flags."""
    number = _float(cell)
    if number is not None and number.is_integer() and "e" not in cell.lower():
        return str(int(number))
    return cell
