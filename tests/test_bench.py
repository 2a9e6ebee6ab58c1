"""The benchmark harness: the CPU path (correctness only, and it says so), the table, bad input, the peak derivation.

The timed path needs a GPU; its test is skipped (never passed) without one.
"""

import contextlib
import math
import time

import pytest
import torch

from aisys import bench, hardware
from aisys.bench import Benchmark, Row

H100 = "NVIDIA H100 SXM5 80GB"


def total(x):
    return x.sum()


def summing(n):
    return (torch.arange(n, dtype=torch.float32),)


def gpu_row(**changes):
    """A row as measure() returns it on an H100: 2 GB moved in 1 ms, the baseline taking 1.1 ms."""
    values = dict(name="sum", size="2^28", device="cuda", device_name="NVIDIA H100 80GB HBM3", seconds=1e-3,
                  correct=True, max_error=0.0, spread=0.02, reps=30, input_sets=2, bytes=2e9, flops=None,
                  baseline_seconds=1.1e-3, chip=H100, peak_bandwidth=3.35e12,
                  peak_flops=hardware.chip(H100).peak("fp32"), copy_bandwidth=3e12)
    return Row(**(values | changes))


# --- the CPU path: correctness only, and it says so ---------------------------------------------------


def test_on_a_cpu_each_kernel_runs_once_for_correctness_and_the_harness_says_no_gpu_was_measured():
    right = Benchmark("sum", total, torch.sum, make_inputs=summing)
    wrong = Benchmark("first block only", lambda x: x[:128].sum(), torch.sum, make_inputs=summing)
    with pytest.warns(bench.NotAGPUWarning, match="no GPU"):
        rows = bench.measure([right, wrong], [1000, 4096], device="cpu")
    assert [(r.name, r.size, r.correct) for r in rows] == [
        ("sum", "1000", True), ("sum", "2^12", True), ("first block only", "1000", False),
        ("first block only", "2^12", False)]
    assert all(r.device == "cpu" and r.peak_bandwidth is None and r.copy_bandwidth is None for r in rows)
    assert rows[2].max_error == pytest.approx(sum(range(128, 1000)))
    text = bench.table(rows)
    assert text.startswith(bench.NO_GPU)
    assert "GB/s" not in text and "NO" in text  # no rates pretending to be a GPU's; the wrong kernel is flagged


def test_bytes_default_to_each_input_and_output_once_and_flops_are_the_benchmarks():
    add = Benchmark("add", torch.add, torch.add, make_inputs=lambda n: (torch.ones(n), torch.ones(n)),
                    flops=lambda n: n)
    with pytest.warns(bench.NotAGPUWarning):
        (row,) = bench.measure(add, [100], device="cpu")
    assert (row.bytes, row.flops) == (3 * 100 * 4, 100)
    own = Benchmark("add", torch.add, None, make_inputs=lambda n: (torch.ones(n), torch.ones(n)), bytes=lambda n: 7)
    with pytest.warns(bench.NotAGPUWarning):
        (row,) = bench.measure(own, [100], device="cpu")
    assert (row.bytes, row.correct, row.baseline_seconds) == (7, True, None)


def test_a_triton_kernel_runs_in_the_interpreter_under_the_harness(torch_device):
    import triton
    import triton.language as tl

    @triton.jit
    def double(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(out_ptr + offsets, 2 * tl.load(x_ptr + offsets, mask=mask), mask=mask)

    def run(x):
        out = torch.empty_like(x)
        double[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
        return out

    where = torch_device  # the interpreter on a CPU, compiled (and timed) on a GPU
    benchmark = Benchmark("double", run, lambda x: 2 * x, make_inputs=lambda n: torch.randn(n, device=where))
    with pytest.warns(bench.NotAGPUWarning) if where == "cpu" else contextlib.nullcontext():
        rows = bench.measure(benchmark, [1, 1000], reps=3)
    assert all(r.correct and r.device == where for r in rows)


def test_outputs_compare_with_nan_and_inf_in_place_and_tolerances_by_dtype():
    special = torch.tensor([1.0, math.inf, -math.inf, math.nan])
    same = Benchmark("same", lambda x: x.clone(), lambda x: x, make_inputs=lambda n: special)
    ones = dict(make_inputs=lambda n: torch.ones(n))
    off = Benchmark("bf16", lambda x: (x * 1.01).bfloat16(), lambda x: x.bfloat16(), **ones)
    far = Benchmark("bf16 far", lambda x: (x * 1.05).bfloat16(), lambda x: x.bfloat16(), **ones)
    shape = Benchmark("shape", lambda x: x[:-1], lambda x: x, make_inputs=lambda n: torch.ones(n))
    with pytest.warns(bench.NotAGPUWarning):
        rows = bench.measure([same, off, far, shape], [4], device="cpu")
    assert [(r.correct, r.max_error) for r in rows] == [
        (True, 0.0), (True, pytest.approx(0.0078125)), (False, pytest.approx(0.046875)), (False, math.inf)]


def test_atol_of_largest_scales_the_absolute_tolerance_by_each_baseline_tensor_s_largest_entry():
    """A small entry off by a rounding of the large ones passes normwise and fails elementwise."""
    values = torch.tensor([1000.0, 0.001])
    off = lambda x: x + torch.tensor([0.0, 0.5])  # 0.5 is 5e-4 of the largest entry  # noqa: E731
    elementwise = Benchmark("elementwise", off, lambda x: x, make_inputs=lambda n: values, rtol=0, atol=1e-3)
    normwise = Benchmark("normwise", off, lambda x: x, make_inputs=lambda n: values, rtol=0, atol=1e-3,
                         atol_of_largest=True)
    tight = Benchmark("tight", off, lambda x: x, make_inputs=lambda n: values, rtol=0, atol=1e-4,
                      atol_of_largest=True)
    with pytest.warns(bench.NotAGPUWarning):
        rows = bench.measure([elementwise, normwise, tight], [2], device="cpu")
    assert [r.correct for r in rows] == [False, True, False]


# --- the table and the plot, from rows as measure() makes them ----------------------------------------


def test_a_row_reports_bandwidth_as_fractions_of_the_datasheet_peak_and_of_the_measured_copy():
    row = gpu_row()
    assert row.bandwidth == pytest.approx(2e12)
    assert row.fraction_of_peak_bandwidth == pytest.approx(2e12 / 3.35e12)
    assert row.fraction_of_copy == pytest.approx(2 / 3)
    assert row.speedup == pytest.approx(1.1)
    assert row.flop_rate is None and row.fraction_of_peak_flops is None
    bare = gpu_row(chip=None, peak_bandwidth=None, peak_flops=None, copy_bandwidth=None, baseline_seconds=None)
    assert (bare.fraction_of_peak_bandwidth, bare.fraction_of_copy, bare.speedup) == (None, None, None)


def test_the_gpu_table_has_one_aligned_row_per_kernel_and_size_and_says_what_was_measured():
    rows = [gpu_row(), gpu_row(size="2^20", seconds=2e-5, bytes=8e6, baseline_seconds=1e-5, spread=0.1)]
    text = bench.table(rows)
    assert "NVIDIA H100 80GB HBM3, in aisys.hardware as NVIDIA H100 SXM5 80GB (HBM peak 3,350 GB/s)" in text
    assert "3,000 GB/s" in text and "median of 30 repetitions" in text and "L2 flushed" in text
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("kernel"))
    grid = lines[header:]
    assert len(grid) == 2 + len(rows)
    assert grid[0].split() == ["kernel", "size", "median", "ms", "IQR", "%", "GB/s", "%", "peak", "BW", "%", "copy",
                               "BW", "baseline", "ms", "vs", "baseline", "ok"]
    assert grid[2].split() == ["sum", "2^28", "1.0000", "2.0", "2,000", "59.7", "66.7", "1.1000", "1.10x", "yes"]
    assert grid[3].split() == ["sum", "2^20", "0.0200", "10.0", "400", "11.9", "13.3", "0.0100", "0.50x", "yes"]
    assert len({len(line) for line in grid[:2]}) == 1  # the rule is as wide as the header
    assert "TFLOP/s" not in text  # no kernel reported FLOPs


def test_the_table_shows_flop_rates_unknown_chips_and_wrong_outputs():
    rows = [gpu_row(name="softmax", flops=6.69e9, correct=False, chip=None, peak_bandwidth=None, peak_flops=None,
                    device_name="NVIDIA H100 PCIe")]
    text = bench.table(rows)
    assert "not in aisys.hardware" in text and "WRONG OUTPUT" in text and "softmax 2^28" in text
    assert "TFLOP/s" in text
    cells = text.splitlines()[-1].split()
    assert cells[:5] == ["softmax", "2^28", "1.0000", "2.0", "2,000"]
    assert cells[5] == "-" and cells[-1] == "NO"  # no datasheet peak to compare with
    with_peak = bench.table([gpu_row(flops=6.69e9)]).splitlines()[-1].split()
    assert with_peak[7:9] == ["6.69", "10.0"]  # 6.69 TFLOP/s is 10% of the H100's 66.9 fp32


def test_sizes_read_as_powers_of_two_and_shapes():
    assert [bench.size_label(s) for s in (2**28, 1000, 1024, 1, (4096, 8192), "big")] == [
        "2^28", "1000", "2^10", "1", "4096x8192", "big"]


def test_plot_saves_one_panel_per_kernel(tmp_path):
    rows = [gpu_row(size=s, seconds=t) for s, t in (("2^20", 1e-5), ("2^24", 1e-4), ("2^28", 1e-3))]
    rows += [gpu_row(name="softmax", bytes=None, flops=1e9)]
    path = bench.plot(rows, tmp_path / "sweep.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --- bad input gets errors naming the argument ------------------------------------------------------


@pytest.mark.parametrize("change, error, words", [
    (dict(name=""), ValueError, "name"),
    (dict(run=3), TypeError, "run must be callable"),
    (dict(baseline="torch.sum"), TypeError, "baseline must be callable"),
    (dict(make_inputs=None), TypeError, "make_inputs must be callable"),
    (dict(bytes=10), TypeError, "bytes must be callable"),
    (dict(flops="many"), TypeError, "flops must be callable"),
    (dict(compute="fp33"), ValueError, "compute"),
    (dict(rtol=-1), ValueError, "rtol"),
])
def test_a_benchmark_names_the_bad_argument(change, error, words):
    arguments = dict(name="sum", run=total, baseline=torch.sum, make_inputs=summing) | change
    with pytest.raises(error, match=words):
        Benchmark(arguments.pop("name"), arguments.pop("run"), arguments.pop("baseline"), **arguments)


@pytest.mark.parametrize("arguments, words", [
    (dict(benchmarks=[], sizes=[1]), "benchmarks"),
    (dict(benchmarks=[total], sizes=[1]), "benchmarks"),
    (dict(sizes=[]), "sizes"),
    (dict(sizes=5), "sizes"),
    (dict(sizes=[1], reps=0), "reps"),
    (dict(sizes=[1], warmup=-1), "warmup"),
    (dict(sizes=[1], input_sets=0), "input_sets"),
    (dict(sizes=[1], device="tpu"), "device"),
    (dict(sizes=[1], copy_bandwidth=-1.0), "copy_bandwidth"),
])
def test_measure_names_the_bad_argument(arguments, words):
    arguments = dict(benchmarks=Benchmark("sum", total, torch.sum, make_inputs=summing)) | arguments
    with pytest.raises(ValueError, match=words):
        bench.measure(arguments.pop("benchmarks"), **arguments)


def test_what_the_benchmarks_callables_return_is_checked():
    cases = [
        (Benchmark("none", total, None, make_inputs=lambda n: None), ValueError, "make_inputs"),
        (Benchmark("number", lambda x: 3.0, None, make_inputs=summing), TypeError, "run of 'number'"),
        (Benchmark("bytes", total, None, make_inputs=summing, bytes=lambda n: -1), ValueError, "bytes"),
        (Benchmark("flops", total, None, make_inputs=summing, flops=lambda n: math.nan), ValueError, "flops"),
    ]
    for benchmark, error, words in cases:
        with pytest.warns(bench.NotAGPUWarning), pytest.raises(error, match=words):
            bench.measure(benchmark, [4], device="cpu")


def test_table_and_plot_name_their_bad_arguments(tmp_path):
    for bad in ([], None, ["row"]):
        with pytest.raises(ValueError, match="rows"):
            bench.table(bad)
    with pytest.raises(ValueError, match="path"):
        bench.plot([gpu_row()], tmp_path / "missing" / "sweep.png")


# --- how a GPU's TFLOPS figure is computed --------------------------------------------------------


def test_peaks_derived_from_units_and_clocks_reproduce_the_datasheets_within_one_percent():
    for name, formulas in hardware.PEAK_FORMULAS.items():
        for dtype, formula in formulas.items():
            assert formula.flops == pytest.approx(hardware.chip(name).peak(dtype), rel=0.01), (name, dtype)
    for gpu in (c for c in hardware.CHIPS.values() if c.kind == "gpu"):
        assert "fp32" in hardware.PEAK_FORMULAS[gpu.name]
        assert set(hardware.PEAK_FORMULAS[gpu.name]) == set(gpu.peak_flops)


def test_the_h100_answer_written_out():
    fp32 = hardware.peak_formula(H100, "float32")
    assert fp32.explain() == "132 SMs x 128 FP32 cores x 2 FLOP/clock x 1.98 GHz = 66.9 TFLOP/s"
    bf16 = hardware.peak_formula(H100, "bf16")
    assert bf16.explain() == "132 SMs x 4 Tensor Cores x 1024 FLOP/clock x 1.83 GHz = 989.4 TFLOP/s"
    with pytest.raises(ValueError, match="dtype"):
        hardware.peak_formula(H100, "int4")


def test_torch_device_names_map_to_the_table_only_where_unambiguous():
    assert hardware.chip_for_device("NVIDIA H100 80GB HBM3").name == H100
    assert hardware.chip_for_device("NVIDIA H200").name == "NVIDIA H200 SXM 141GB"
    assert hardware.chip_for_device("NVIDIA H100 PCIe") is None  # other clocks and bandwidth than the SXM5
    with pytest.raises(TypeError, match="device_name"):
        hardware.chip_for_device(None)


# --- on a GPU: the timed path ------------------------------------------------------------------------


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_a_copy_runs_near_the_measured_copy_bandwidth_and_torch_sum_near_the_copy():
    copy = Benchmark("clone", torch.clone, torch.clone, make_inputs=lambda n: torch.randn(n, device="cuda"))
    add = Benchmark("sum", total, torch.sum, make_inputs=lambda n: torch.rand(n, device="cuda"))
    rows = bench.measure([copy, add], [2**26], device="cuda", reps=10)
    assert all(r.correct and r.device == "cuda" for r in rows)
    clone, sum_ = rows
    assert 0.7 < clone.fraction_of_copy < 1.3 and 0.7 < clone.speedup < 1.3  # the same op twice
    assert 0.5 < sum_.fraction_of_copy < 1.3
    if clone.peak_bandwidth:
        assert clone.fraction_of_peak_bandwidth < 1.0
    assert "GB/s" in bench.table(rows)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_hosts_launch_overhead_is_not_timed():
    def slow_host(x):  # 0.1 ms of Python before a kernel of a few microseconds
        end = time.perf_counter() + 1e-4
        while time.perf_counter() < end:
            pass
        return x + 1

    tiny = Benchmark("slow host", slow_host, None, make_inputs=lambda n: torch.ones(n, device="cuda"))
    (row,) = bench.measure([tiny], [1024], device="cuda", reps=10)
    assert row.seconds < 5e-5, f"{row.seconds * 1e6:.0f} us: the host's 100 us were timed"


def test_gpu_label_is_the_short_name_stored_measurements_carry():
    assert bench.gpu_label("NVIDIA H100 80GB HBM3") == "h100" and bench.gpu_label("NVIDIA H200") == "h200"
    assert bench.gpu_label("NVIDIA A100-SXM4-80GB") == "a100"


def test_tuned_against_readable_pairs_each_tuned_row_with_its_readable_twin_at_the_same_size():
    def row(name, size, seconds, baseline_seconds):
        return Row(name=name, size=size, device="cuda", device_name="gpu", seconds=seconds, correct=True, max_error=0,
                   baseline_seconds=baseline_seconds)

    rows = [row("norm readable", "1x8", 2.0, 1.0), row("norm tuned", "1x8", 0.5, 1.0),
            row("norm tuned", "1x16", 0.5, 1.0),  # no readable twin at this size: no line
            row("other", "1x8", 1.0, 1.0)]
    (line,) = bench.tuned_against_readable(rows, "torch")
    assert line == ("norm readable 1x8  readable 0.50x torch, tuned 2.00x torch (4.00x the readable kernel's speed)")
    assert bench.tuned_against_readable(rows[2:], "torch") == []
