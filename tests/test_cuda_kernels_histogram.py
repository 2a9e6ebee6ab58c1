"""The privatised histogram reference: exact counts, one global atomic per bin per block, no races; and what the
exercise's check reads from wrong counts."""

import numpy as np
import pytest

from aisys import simt
from aisys.cuda_kernels.histogram import BINS_MAX, histogram
from aisys_grader import InProcessStudent, checks_for, run


@pytest.mark.parametrize("n, bins", [(0, 4), (1, 1), (33, 32), (1000, 7), (3000, 256)])
def test_histogram_matches_bincount(n, bins):
    values = np.random.default_rng(n).integers(0, bins, size=n, dtype=np.int32)
    assert (histogram(values, bins) == np.bincount(values, minlength=bins)).all()


def test_skewed_data_all_in_one_bin():
    assert histogram(np.full(2000, 5, np.int32), 6).tolist() == [0, 0, 0, 0, 0, 2000]


@pytest.mark.parametrize("values, bins", [(np.array([0, 3], np.int32), 3), (np.array([-1], np.int32), 3),
                                          (np.zeros(3, np.int64), 3), (np.zeros((2, 2), np.int32), 3),
                                          (np.zeros(3, np.int32), 0), (np.zeros(3, np.int32), BINS_MAX + 1)])
def test_histogram_rejects_what_it_cannot_count(values, bins):
    with pytest.raises(ValueError, match="values must|bins must"):
        histogram(values, bins)


def test_global_atomics_are_one_per_bin_per_block():
    values = np.random.default_rng(0).integers(0, 16, size=10_000, dtype=np.int32)
    with simt.profile() as launches:
        histogram(values, 16)
    (report,) = [launch.to_plain() for launch in launches]
    blocks = report["grid"][0]
    assert report["atomics"]["operations"] <= values.size + blocks * 16  # one shared per element, one global per bin
    global_lines = [line for line in report["lines"] if line["space"] == "global" and line["kind"] == "atomic"]
    assert sum(line["requests"] for line in global_lines) == blocks  # 16 bins: one warp per block flushes them
    assert sum(line["operations"] for line in global_lines) == blocks * 16  # every bin of every block is used
    assert report["errors"] == []


def _graded(histogram) -> str:
    result = run(checks_for("02-gpu-programming/histogram")["histogram"], InProcessStudent({"histogram": histogram}),
                 hidden=True, seed=1)
    assert result.failed
    return result.message


@pytest.mark.parametrize("counts, said", [
    (lambda values, bins: 2 * np.bincount(values, minlength=bins), "counted more than once"),
    (lambda values, bins: np.bincount(values[1:], minlength=bins), "add up to fewer"),
    (lambda values, bins: np.bincount(values, minlength=bins) + 0x7F7F7F7F, "started from whatever shared memory"),
    (lambda values, bins: np.bincount(values, minlength=bins).astype(np.float32), "expected an integer array")])
def test_the_histogram_check_says_what_wrong_counts_show(counts, said):
    assert said in _graded(counts)
