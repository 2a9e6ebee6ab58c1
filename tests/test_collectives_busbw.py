"""Bus bandwidth as nccl-tests defines it, and the link table it is compared with."""

import pytest

from aisys.collectives.busbw import algorithm_bandwidth, bus_bandwidth, bus_factor
from aisys.hardware import CHIPS
from aisys.interconnect import GPU_LINK, LINKS


@pytest.mark.parametrize("collective, p, factor", [
    ("all_reduce", 1, 0.0), ("all_reduce", 2, 1.0), ("all_reduce", 8, 1.75),
    ("all_gather", 8, 0.875), ("reduce_scatter", 4, 0.75), ("all_to_all", 2, 0.5),
    ("broadcast", 8, 1.0), ("reduce", 3, 1.0),
])
def test_bus_factor_is_the_fraction_each_rank_moves(collective, p, factor):
    assert bus_factor(collective, p) == pytest.approx(factor)


def test_bus_bandwidth_of_a_1_gib_all_reduce_on_8_ranks():
    # nccl-tests: algbw = size / time; busbw = algbw * 2(n-1)/n.
    assert algorithm_bandwidth(2**30, 0.01) == pytest.approx(2**30 / 0.01)
    assert bus_bandwidth("all_reduce", 2**30, 0.01, 8) == pytest.approx(2**30 / 0.01 * 1.75)


@pytest.mark.parametrize("call, message", [
    (lambda: bus_factor("allreduce", 2), "collective must be one of"),
    (lambda: bus_factor("all_reduce", 0), "world_size must be an integer >= 1"),
    (lambda: bus_bandwidth("all_reduce", 1024, 0, 2), "seconds must be a finite number > 0"),
    (lambda: bus_bandwidth("all_reduce", -1, 1, 2), "nbytes must be a number >= 0"),
])
def test_bad_input_names_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_links_are_one_way_with_sources_and_gpu_links_name_known_chips():
    assert LINKS["NVLink 4 (H100/H200 SXM)"].bandwidth == 450e9  # half of the datasheet's 900 GB/s
    assert LINKS["PCIe 5.0 x16"].bandwidth == pytest.approx(63.0e9, rel=1e-3)
    assert all(link.source for link in LINKS.values())
    assert all(chip in CHIPS and link in LINKS for chip, link in GPU_LINK.items())


def test_importing_aisys_keeps_gpu_checks_from_initialising_cuda():
    """Forked NCCL ranks need a parent that never initialised the CUDA driver (see aisys/__init__.py)."""
    import os

    import aisys  # noqa: F401

    assert os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK") == "1"
