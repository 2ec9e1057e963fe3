"""The pulse gaps a link keeps for its end-of-job summary (wire.liveness.Gaps): constant
memory, quantiles within the bucket precision, cheap to summarise for thousands of links."""

import random
import statistics
import time

import pytest

from ringleader.wire.liveness import GAP_BUCKET_RATIO, Gaps

PRECISION = GAP_BUCKET_RATIO**0.5 - 1  # the middle of a bucket is this close to its ends


def filled(values: list[float]) -> Gaps:
    gaps = Gaps()
    for value in values:
        gaps.add(value)
    return gaps


def test_quantiles_are_within_the_bucket_precision():
    rng = random.Random(29)
    values = [rng.lognormvariate(0.9, 0.3) for _ in range(20_000)]
    gaps = filled(values)
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    assert gaps.count == len(values)
    assert gaps.largest == max(values)
    for fraction, exact in ((0.5, cuts[49]), (0.99, cuts[98])):
        assert gaps.quantile(fraction) == pytest.approx(exact, rel=PRECISION + 0.005)


def test_regular_pulses_read_as_their_interval_and_one_stall_as_the_max():
    gaps = filled([2.5] * 1000 + [31.0])
    assert gaps.quantile(0.5) == pytest.approx(2.5, rel=PRECISION)
    assert gaps.quantile(0.99) == pytest.approx(2.5, rel=PRECISION)
    assert gaps.largest == 31.0
    assert gaps.quantile(1.0) == pytest.approx(31.0, rel=PRECISION)
    assert filled([2.5]).quantile(0.5) <= 2.5  # never more than the largest gap


def test_no_gap_and_tiny_gaps():
    assert Gaps().quantile(0.5) == 0.0
    gaps = filled([0.0, 1e-9])
    assert gaps.count == 2
    assert gaps.quantile(0.5) <= 1e-9 or gaps.quantile(0.5) == pytest.approx(1e-4, rel=0.05)


def test_memory_does_not_grow_with_the_pulses():
    rng = random.Random(3)
    gaps = filled([rng.uniform(2.0, 3.0) for _ in range(100_000)])
    # 2.0 to 3.0 s spans log(1.5)/log(1.02) ~ 21 buckets, whatever the number of pulses
    assert len(gaps._buckets) <= 25


def test_summaries_of_4096_links_a_day_long_take_a_fraction_of_the_stop_time():
    """pulse_process.STOP_SECONDS is 2 s for every link's summary: a day of pulses at 2.5 s
    on 4,096 links must summarise in well under it (sorting full lists did not)."""
    links = []
    rng = random.Random(7)
    for _ in range(4096):
        gaps = Gaps()
        for _ in range(50):  # ~ the buckets a day of jittered pulses fills
            gaps.add(rng.uniform(2.3, 2.7))
        gaps.count = 34_560  # a day at 2.5 s: the count does not change the work
        links.append(gaps)
    started = time.process_time()
    for gaps in links:
        gaps.quantile(0.5), gaps.quantile(0.99)
    assert time.process_time() - started < 0.5
