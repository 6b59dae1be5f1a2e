"""What the adaptive rules read from a gallery's statistics (:func:`galleria.statistics.read_statistics`)."""

from __future__ import annotations

import pytest

from galleria.statistics import EXPAND_RISE, EXPAND_SHARE, FIRST_RISE, GalleryStatistics, read_statistics


def _stats(first: float, middle: float, last: float, median: float = 13.0) -> GalleryStatistics:
    return GalleryStatistics(1000, 200, (5, 10, 20), (first, middle, last), (3.0, 6.0, median))


@pytest.mark.parametrize("first", [0.2, 0.4, 0.5, 0.57, 0.6, 0.7])
@pytest.mark.parametrize("rise", [-0.05, 0.0, 0.02, 0.05, 0.089, 0.09, 0.13, 0.3])
@pytest.mark.parametrize("median", [1.0, 5.0, 15.0])
def test_rise_is_the_growth_of_the_mutual_share_and_spreads_reads_it(
    first: float, rise: float, median: float
) -> None:
    last = min(1.0, round(first + rise, 6))
    reading = read_statistics(_stats(first, (first + last) / 2, last, median))
    assert reading.first == first and reading.share == last
    assert reading.rise == pytest.approx(last - first, abs=1e-6)
    high = last >= EXPAND_SHARE
    assert reading.spreads == (not reading.flat and (last - first >= EXPAND_RISE - 1e-9 or high))
    if reading.flat:  # no structure: nothing is averaged in, whatever the rise
        assert not reading.spreads


def test_the_corpus_cases_the_constant_was_read_from() -> None:
    """The pixel digits (rise 0.12–0.13) and the digits cut to 20 a class (share 0.72–0.75) spread; the
    Lite0 stamps (rise 0.04–0.06, share 0.59–0.61) and glyphs in 40 fonts (0.61 at 5, 0.63 at 20) do not."""
    assert read_statistics(_stats(0.604, 0.66, 0.725, 15.0)).spreads
    assert read_statistics(_stats(0.66, 0.74, 0.7194, 15.0)).spreads
    assert not read_statistics(_stats(0.531, 0.56, 0.594)).spreads
    assert not read_statistics(_stats(0.607, 0.6095, 0.627)).spreads
    assert FIRST_RISE < EXPAND_RISE  # trusting the first match needs less than averaging past it


def test_a_gallery_too_small_to_measure_reads_as_flat() -> None:
    reading = read_statistics(GalleryStatistics(2, 0, (), (), ()))
    assert reading.flat and reading.rise == 0.0 and not reading.spreads
