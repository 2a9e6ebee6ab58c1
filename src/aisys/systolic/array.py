"""A cycle-accurate systolic array: a grid of processing elements (PEs) whose registers change once per cycle.

`run` pushes one tile of a matrix product through a `rows x cols` array. In every cycle it asks
`skew` which element of each input stream enters at the array's edges, asks `step` for every
register's value one cycle later, and accepts that answer only if it obeys the dataflow's
locality rule: a value moves at most one PE per cycle, to the right or down, and a PE adds only
the product of the values it holds. A step that breaks the rule stops the run with a
LocalityError naming the cycle, the PE, the register, and where the value it holds was one
cycle earlier. Each accepted cycle goes into a Trace together with where every value came from,
so that utilisation and the cycle count are measured from the run, not assumed.

The dataflows are named, as in Chen, Emer and Sze (ISCA 2016), by what stays in the PEs:

- output-stationary ("os"): PE(i, j) accumulates C[i, j] in register `acc`. Row i of A enters
  PE(i, 0) and moves right through register `a`; column j of B enters PE(0, j) and moves down
  through register `b`:
      a'[i, j] = a[i, j-1]  (left[i] for j = 0)
      b'[i, j] = b[i-1, j]  (top[j] for i = 0)
      acc'[i, j] = acc[i, j] + a'[i, j] * b'[i, j]
- weight-stationary ("ws"): PE(i, j) holds the weight w = B[i, j], loaded before the product
  starts by shifting the rows of B down from the top edge, last row first, one row per cycle.
  Column i of A (the activations) enters PE(i, 0) and moves right through register `x`; partial
  sums move down through register `psum` and leave the bottom row as finished outputs:
      x'[i, j] = x[i, j-1]  (left[i] for j = 0)
      psum'[i, j] = psum[i-1, j] + x'[i, j] * w[i, j]  (0 + ... for i = 0)

Conventions. Cycle 0 is the first cycle in which data enters the array, and a run of T cycles
is cycles 0 .. T-1. Within a cycle values move first, then each PE multiplies the values that
have just arrived. An empty slot (a bubble) holds 0. A run ends with the cycle in which its last
output is complete: for OS, when the last product is added to an accumulator (reading the
accumulators out afterwards is not modelled); for WS, when the last partial sum reaches the
bottom row of the array, from which it leaves.
"""

from dataclasses import dataclass, field

import numpy as np

from .._validate import one_of, positive_int

DATAFLOWS = ("os", "ws")
NAMES = {"os": "output-stationary", "ws": "weight-stationary"}
STEP_NAMES = {"os": "os_step", "ws": "ws_step"}
REGISTERS = {"os": ("a", "b", "acc"), "ws": ("w", "x", "psum")}
BUBBLE = -1  # the source of an empty slot: no element of any stream


class LocalityError(ValueError):
    """A step gave a register a value it cannot hold: one from further than one PE, or a product of values elsewhere."""


@dataclass
class Trace:
    """Every cycle of one run: the registers, where their values came from, and which PEs did useful work.

    `sources[t]` says where each register's value came from after cycle t, as (rows, cols) integer
    arrays: for OS, "a" and "b" hold k (the PE holds A[i, k] and B[k, j]); for WS, "w" holds k (the
    weight B[k, j]), "x" holds m (the activation A[m, i]) and "psum" the row m of C whose partial sum it
    carries; "terms" counts the products A[., k] * B[k, .] of matching k added so far. BUBBLE (-1)
    marks an empty slot. A PE is busy in a cycle when its multiply-add combined such a matching pair.
    """

    dataflow: str
    rows: int
    cols: int
    registers: list = field(default_factory=list)  # per cycle: {register name: (rows, cols) array}
    sources: list = field(default_factory=list)  # per cycle: {name: (rows, cols) int array}
    busy: list = field(default_factory=list)  # per cycle: (rows, cols) bool
    phases: list = field(default_factory=list)  # per cycle: "load" (WS weights moving in) or "compute"
    mismatches: list = field(default_factory=list)  # multiply-adds of operands that belong to different terms
    output: np.ndarray | None = None  # the tile of C the array delivered
    complete: bool = False  # every output received all its terms before the run's cycle limit

    @property
    def cycles(self) -> int:
        return len(self.registers)

    @property
    def utilisation(self) -> np.ndarray:
        """Fraction of the array's PEs doing useful work, per cycle."""
        return np.array([busy.mean() for busy in self.busy], dtype=float)

    def _record(self, phase: str, registers: dict, sources: dict, busy: np.ndarray) -> None:
        self.phases.append(phase)
        self.registers.append({name: value.copy() for name, value in registers.items()})
        self.sources.append({name: value.copy() for name, value in sources.items()})
        self.busy.append(busy.copy())


@dataclass
class TiledRun:
    """A product larger than the array, computed tile after tile: C and the trace of every tile, in order."""

    output: np.ndarray
    traces: list

    @property
    def cycles(self) -> int:
        return sum(trace.cycles for trace in self.traces)

    @property
    def utilisation(self) -> np.ndarray:
        return np.concatenate([trace.utilisation for trace in self.traces])


def run(A, B, rows: int, cols: int, dataflow: str, *, step, skew) -> Trace:
    """Compute one tile of A @ B on a `rows x cols` array, cycle by cycle; the Trace of every cycle.

    `skew(t, n, length)` returns, for each of n input streams of `length` elements, the index of
    the element that enters the array in cycle t, or -1 for none. `step` is
    `os_step(a, b, acc, left, top) -> (a, b, acc)` or `ws_step(x, psum, w, left) -> (x, psum)`: given
    the registers and the values entering at the left and top edges, the registers one cycle later.

    Output-stationary: A is m x K and B is K x n with m <= rows and n <= cols; the streams are the
    rows of A (entering at the left) and the columns of B (at the top), each K long.
    Weight-stationary: A is M x k and B is k x n with k <= rows and n <= cols, and any M; the streams
    are the columns of A, each M long. Raises LocalityError when `step` breaks the dataflow's rule.
    """
    rows, cols = positive_int("rows", rows), positive_int("cols", cols)
    one_of("dataflow", dataflow, DATAFLOWS)
    A, B = _matrices(A, B)
    if not (callable(step) and callable(skew)):
        raise TypeError("step and skew must be functions (see run's docstring)")
    fits = (A.shape[0], B.shape[1]) if dataflow == "os" else (A.shape[1], B.shape[1])
    if fits[0] > rows or fits[1] > cols:
        what = "C" if dataflow == "os" else "B (the weights)"
        raise ValueError(f"a {NAMES[dataflow]} {rows} x {cols} array holds at most a {rows} x {cols} tile of "
                         f"{what}; this one is {fits[0]} x {fits[1]}: cut larger products into tiles (run_schedule)")
    trace = Trace(dataflow, rows, cols)
    (_run_os if dataflow == "os" else _run_ws)(A, B, trace, step, skew)
    return trace


def run_schedule(A, B, rows: int, cols: int, dataflow: str, tiles, *, step, skew) -> TiledRun:
    """Compute A @ B of any size on the array, one tile after another, in the order of `tiles`.

    Each tile is a dict {"m": [m0, m1], "n": [n0, n1], "k": [k0, k1]} of half-open ranges: it adds
    A[m0:m1, k0:k1] @ B[k0:k1, n0:n1] into C[m0:m1, n0:n1]. Partial sums of different tiles meet
    outside the array, in an accumulator memory (the TPU's 4 MiB of accumulators sit below its
    array). A tile must fit the array: OS holds m1 - m0 <= rows by n1 - n0 <= cols outputs, WS
    k1 - k0 <= rows by n1 - n0 <= cols weights. Tiles never overlap in time.
    """
    A, B = _matrices(A, B)
    M, K = A.shape
    N = B.shape[1]
    if not isinstance(tiles, (list, tuple)):
        raise TypeError("tiles must be a list of dicts {'m': [m0, m1], 'n': [n0, n1], 'k': [k0, k1]}, "
                        f"got {_short(tiles)}")
    bounds = [tile_ranges(tile, M, N, K, f"tiles[{i}]") for i, tile in enumerate(tiles)]
    output = np.zeros((M, N), _register_dtype(A, B))
    traces = []
    for i, (ms, ns, ks) in enumerate(bounds):
        try:
            trace = run(A[ms, ks], B[ks, ns], rows, cols, dataflow, step=step, skew=skew)
        except ValueError as error:  # a LocalityError stays one
            raise type(error)(f"tiles[{i}] {tiles[i]!r}: {error}") from None
        output[ms, ns] += trace.output
        traces.append(trace)
    return TiledRun(output, traces)


def tile_ranges(tile, M: int, N: int, K: int, name: str = "tile") -> tuple[slice, slice, slice]:
    """The slices of a tile {"m": [m0, m1], "n": [n0, n1], "k": [k0, k1]}, each range checked against its size."""
    if not isinstance(tile, dict) or set(tile) != {"m", "n", "k"}:
        raise ValueError(f"{name} must be a dict with keys 'm', 'n' and 'k', each [start, stop]; got {_short(tile)}")
    slices = []
    for key, size in (("m", M), ("n", N), ("k", K)):
        span = tile[key]
        if not (isinstance(span, (list, tuple)) and len(span) == 2
                and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in span)):
            raise ValueError(f"{name}[{key!r}] must be [start, stop], two integers; got {_short(span)}")
        start, stop = int(span[0]), int(span[1])
        if not 0 <= start < stop <= size:
            raise ValueError(f"{name}[{key!r}] = [{start}, {stop}] must satisfy "
                             f"0 <= start < stop <= {key.upper()} = {size}")
        slices.append(slice(start, stop))
    return tuple(slices)


def _matrices(A, B) -> tuple[np.ndarray, np.ndarray]:
    arrays = []
    for name, value in (("A", A), ("B", B)):
        array = np.asarray(value)
        if array.ndim != 2 or 0 in array.shape or array.dtype.kind not in "iuf":
            raise ValueError(f"{name} must be a non-empty 2-D array of integers or floats, "
                             f"got shape {array.shape} and dtype {array.dtype}")
        arrays.append(array)
    A, B = arrays
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"A @ B needs A's columns to match B's rows; got A {A.shape} and B {B.shape}")
    return A, B


def _register_dtype(A: np.ndarray, B: np.ndarray) -> np.dtype:
    """Integers accumulate exactly in int64 (int8 products widen, as in the TPU); floats in their own precision."""
    if A.dtype.kind in "iu" and B.dtype.kind in "iu":
        return np.dtype(np.int64)
    return np.result_type(A.dtype, B.dtype, np.float32)


def _shifted(register: np.ndarray, edge: np.ndarray, direction: str) -> np.ndarray:
    """The register after one hop: `edge` enters column 0 (right) or row 0 (down); the last column or row leaves."""
    if direction == "right":
        return np.concatenate([edge[:, None], register[:, :-1]], axis=1)
    return np.concatenate([edge[None, :], register[:-1]], axis=0)


def _entering(skew, t: int, streams: int, length: int, size: int) -> np.ndarray:
    """The skew's answer for cycle t, checked, padded with BUBBLE to the edge's `size` slots."""
    call = f"skew({t}, {streams}, {length})"
    got = skew(t, streams, length)
    try:
        index = np.asarray(got)
    except Exception:  # whatever the student returned, say what was expected
        index = np.asarray(None)
    if index.shape != (streams,) or index.dtype.kind not in "iuf" or not np.array_equal(index, np.round(index)):
        raise ValueError(f"{call} must return {streams} integers, one index per stream; got {_short(got)}")
    bad = (index < BUBBLE) | (index >= length)
    if bad.any():
        s = int(np.argmax(bad))
        raise ValueError(f"{call} gave {index[s]} for stream {s}: each entry must be -1 (nothing enters) "
                         f"or the index 0 .. {length - 1} of the element entering")
    return np.concatenate([index.astype(np.int64), np.full(size - streams, BUBBLE)])


def _returned(value, names: tuple, shape: tuple, t: int, function: str) -> list[np.ndarray]:
    """A step's answer as arrays of the array's shape, or a ValueError saying what was expected."""
    expected = f"({', '.join(names)}), {len(names)} arrays of shape {shape}"
    if not isinstance(value, (tuple, list)) or len(value) != len(names):
        kind = f"{len(value)} values" if isinstance(value, (tuple, list)) else type(value).__name__
        raise ValueError(f"cycle {t}: {function} must return {expected}; it returned {kind}")
    arrays = []
    for name, item in zip(names, value):
        try:
            array = np.asarray(item)
        except Exception:
            array = np.asarray(None)
        if array.shape != shape or array.dtype.kind not in "iuf":
            raise ValueError(f"cycle {t}: {function} returned {name} of shape {array.shape} and dtype {array.dtype}; "
                             f"it must return {expected}")
        arrays.append(array)
    return arrays


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _number(value) -> str:
    value = value.item() if isinstance(value, np.generic) else value
    return f"{value:.6g}" if isinstance(value, float) else str(value)


class _Cycle:
    """One cycle's state before the step and the values entering at the edges: to check a step's answer
    against the locality rule, and to say, when it breaks the rule, where the value it gave came from."""

    DIRECTIONS = {"a": "right", "x": "right", "b": "down", "psum": "down"}
    EDGES = {"right": "left", "down": "top"}

    def __init__(self, t: int, registers: dict, sources: dict, edges: dict, edge_sources: dict):
        self.t = t
        self.registers, self.sources = registers, sources
        self.edges, self.edge_sources = edges, edge_sources  # {"left": values, "top": values}, and their sources
        self.before = f"cycle {t - 1}" if t > 0 else "the empty array before cycle 0"

    def label(self, name: str, i: int, j: int, source: int) -> str:
        """What a register holds, by the element it came from: 'A[1, 2]', or 'a bubble (0)'."""
        if source == BUBBLE:
            return "a bubble (0)"
        if name in ("a", "x"):
            return f"A[{i}, {source}]" if name == "a" else f"A[{source}, {i}]"
        return f"B[{source}, {j}]"  # b and w

    def holding(self, name: str, i: int, j: int, source: int, value) -> str:
        """'A[1, 2] (17)', or 'a bubble (0)'."""
        label = self.label(name, i, j, source)
        return label if source == BUBBLE else f"{label} ({_number(value)})"

    def require_moved(self, name: str, new: np.ndarray) -> None:
        """`name` must hold, at every PE, what its left (or upper) neighbour held one cycle earlier."""
        direction = self.DIRECTIONS[name]
        edge = self.EDGES[direction]
        expected = _shifted(self.registers[name], self.edges[edge], direction)
        wrong = new != expected
        if not wrong.any():
            return
        places = np.argwhere(wrong)
        informative = [place for place in places if new[tuple(place)] != 0]  # a value where it must not be
        i, j = (int(v) for v in (informative or places)[0])
        sources = _shifted(self.sources[name], self.edge_sources[edge], direction)
        neighbour = (i, j - 1) if direction == "right" else (i - 1, j)
        origin = f"the {edge} edge" if min(neighbour) < 0 else f"PE{neighbour}"
        raise LocalityError(
            f"cycle {self.t}: PE({i}, {j}) register {name} holds {self._whence(name, i, j, new[i, j], direction)}; "
            f"it should hold {self.holding(name, i, j, sources[i, j], expected[i, j])}, from {origin}: "
            f"{name} moves {direction}, one PE per cycle{self._more(wrong)}")

    def _whence(self, name: str, i: int, j: int, value, direction: str) -> str:
        """The value found at PE(i, j) and where it was one cycle earlier."""
        shown = _number(value)
        if value == 0:
            return "0 (a bubble)"
        for other in [name] + [n for n in self.registers if n != name]:
            for i2, j2 in np.argwhere(self.registers[other] == value):
                i2, j2 = int(i2), int(j2)
                what = (self.holding(other, i2, j2, self.sources[other][i2, j2], value)
                        if other in ("a", "b", "x", "w") else shown)
                if other != name:
                    return (f"{what}, which was in register {other} of PE({i2}, {j2}) in {self.before}: "
                            f"each value travels in its own register")
                if (i2, j2) == (i, j):
                    return f"{what}, which was already there in {self.before}: it should have moved on"
                along = i2 == i if direction == "right" else j2 == j
                hops = ((j - j2) if direction == "right" else (i - i2)) if along else 0
                if hops > 1:
                    return (f"{what}, which was at PE({i2}, {j2}) in {self.before}: {hops} PEs in one cycle; "
                            f"data moves one PE per cycle")
                return f"{what}, which was at PE({i2}, {j2}) in {self.before}"
        for edge, values in self.edges.items():
            for slot in np.flatnonzero(values == value):
                return (f"{shown}, which entered at the {edge} edge ({'row' if edge == 'left' else 'column'} "
                        f"{slot}) in this cycle: a value entering at an edge reaches only the first PE of its "
                        f"{'row' if edge == 'left' else 'column'} in that cycle")
        return f"{shown}, which was in no register and at no edge in {self.before}"

    def require_mac(self, name: str, new: np.ndarray, base: np.ndarray, x: np.ndarray, y: np.ndarray,
                    base_text: str, hints: dict) -> None:
        """`name` must be `base + x * y` at every PE (floats: to within rounding); else say what it looks like instead.

        `hints` maps an explanation to what a typical mistake would have produced; the message names the
        PE where the fewest of them fit (one, ideally), since a value that several explain explains little.
        """
        expected = base + x * y
        if new.dtype.kind in "iu" and expected.dtype.kind in "iu":
            wrong = new != expected
        else:
            eps = np.finfo(np.result_type(expected.dtype, np.float32)).eps
            scale = np.abs(base).astype(float) + np.abs(x * y).astype(float)
            wrong = ~(np.abs(new.astype(float) - expected.astype(float)) <= 4 * eps * scale)
        if not wrong.any():
            return

        def fitting(i: int, j: int) -> list[str]:
            found = [hint for hint, value in hints.items()  # a mistake that adds nothing is told apart below
                     if _same(value[i, j], new[i, j]) and not _same(value[i, j], base[i, j])]
            if not found and _same(new[i, j], base[i, j]):
                found = ["nothing was added, though values had just arrived (values move first, then each PE "
                         "multiplies what has just arrived)"]
            return found

        places = [(int(i), int(j)) for i, j in np.argwhere(wrong)]
        i, j = min(places, key=lambda place: {1: 0}.get(len(fitting(*place)), 1 if fitting(*place) else 2))
        why = fitting(i, j)
        raise LocalityError(
            f"cycle {self.t}: PE({i}, {j}) {name} = {_number(new[i, j])} but {base_text} = {_number(base[i, j])} + "
            f"{_number(x[i, j])} * {_number(y[i, j])} = {_number(expected[i, j])}: a PE may only add the product "
            f"of the two values it holds now, never one from elsewhere (a product computed directly breaks the array's "
            f"locality){'; ' + why[0] if why else ''}{self._more(wrong)}")

    @staticmethod
    def _more(wrong: np.ndarray) -> str:
        extra = int(wrong.sum()) - 1
        return f" (and {extra} more PE{'s' if extra > 1 else ''} in this cycle)" if extra else ""


def _same(a, b) -> bool:
    a, b = float(a), float(b)
    return abs(a - b) <= 1e-6 * max(abs(a), abs(b), 1e-30)


def _limit(length: int, rows: int, cols: int) -> int:
    """Cycles after which a run that has not finished gives up: twice what the right skew needs."""
    return 2 * (length + rows + cols)


def _gather(matrix: np.ndarray, index: np.ndarray, by_row: bool, dtype) -> np.ndarray:
    """The values entering: stream s is row s (by_row) or column s of `matrix`; index -1 enters a bubble, 0."""
    values = np.zeros(index.shape, dtype)
    streams = np.flatnonzero(index >= 0)
    values[streams] = matrix[streams, index[streams]] if by_row else matrix[index[streams], streams]
    return values


def _run_os(A: np.ndarray, B: np.ndarray, trace: Trace, step, skew) -> None:
    m, K = A.shape
    n = B.shape[1]
    rows, cols = trace.rows, trace.cols
    dtype = _register_dtype(A, B)
    registers = {name: np.zeros((rows, cols), dtype) for name in ("a", "b", "acc")}
    sources = {"a": np.full((rows, cols), BUBBLE), "b": np.full((rows, cols), BUBBLE),
               "terms": np.zeros((rows, cols), np.int64)}
    for t in range(_limit(K, rows, cols)):
        left_k, top_k = _entering(skew, t, m, K, rows), _entering(skew, t, n, K, cols)
        left, top = _gather(A, left_k, True, dtype), _gather(B.T, top_k, True, dtype)
        answer = step(*(registers[name].copy() for name in ("a", "b", "acc")), left.copy(), top.copy())
        a, b, acc = _returned(answer, ("a", "b", "acc"), (rows, cols), t, "os_step")
        cycle = _Cycle(t, registers, sources, {"left": left, "top": top}, {"left": left_k, "top": top_k})
        cycle.require_moved("a", a)
        cycle.require_moved("b", b)
        old = registers["acc"]
        cycle.require_mac("acc", acc, old, a, b, "acc + a*b", {
            "you multiplied the values from before this cycle's move (values move first, then each PE multiplies "
            "what has just arrived)": old + registers["a"] * registers["b"],
            "that is the product of the values at the edges: a and b reach a PE one hop at a time":
                old + np.outer(left, top),
        })
        registers = {"a": a.astype(dtype), "b": b.astype(dtype), "acc": acc.astype(dtype)}
        a_k, b_k = _shifted(sources["a"], left_k, "right"), _shifted(sources["b"], top_k, "down")
        busy = (a_k >= 0) & (a_k == b_k)
        for i, j in np.argwhere((a_k >= 0) & (b_k >= 0) & (a_k != b_k)):
            trace.mismatches.append(f"cycle {t}: PE({i}, {j}) multiplied A[{i}, {a_k[i, j]}] by B[{b_k[i, j]}, {j}]")
        sources = {"a": a_k, "b": b_k, "terms": sources["terms"] + busy}
        trace._record("compute", registers, sources, busy)
        if (sources["terms"][:m, :n] == K).all():
            trace.complete = True
            break
    trace.output = registers["acc"][:m, :n].copy()


def _run_ws(A: np.ndarray, B: np.ndarray, trace: Trace, step, skew) -> None:
    M, k = A.shape
    n = B.shape[1]
    rows, cols = trace.rows, trace.cols
    dtype = _register_dtype(A, B)
    zeros, no_source = np.zeros((rows, cols), dtype), np.full((rows, cols), BUBBLE)
    registers = {"w": zeros.copy(), "x": zeros.copy(), "psum": zeros.copy()}
    sources = {"w": no_source.copy(), "x": no_source.copy(), "psum": no_source.copy(),
               "terms": np.zeros((rows, cols), np.int64)}
    # Load: row k-1 of B enters first, so that after k shifts down row i of the array holds B[i].
    for t in range(k):
        row = k - 1 - t
        top, top_source = np.zeros(cols, dtype), np.full(cols, BUBBLE)
        top[:n], top_source[:n] = B[row], row
        registers["w"] = _shifted(registers["w"], top, "down")
        sources["w"] = _shifted(sources["w"], top_source, "down")
        trace._record("load", registers, sources, np.zeros((rows, cols), bool))
    w, weighted = registers["w"], sources["w"] >= 0
    output, delivered = np.zeros((M, n), dtype), np.zeros((M, n), bool)
    for c in range(_limit(M, rows, cols)):
        t = k + c
        left_k = _entering(skew, c, k, M, rows)  # stream i is column i of A: A[0, i], A[1, i], ...
        left = _gather(A.T, left_k, True, dtype)
        answer = step(registers["x"].copy(), registers["psum"].copy(), w.copy(), left.copy())
        x, psum = _returned(answer, ("x", "psum"), (rows, cols), t, "ws_step")
        cycle = _Cycle(t, registers, sources, {"left": left, "top": np.zeros(cols, dtype)},
                       {"left": left_k, "top": np.full(cols, BUBBLE)})
        cycle.require_moved("x", x)
        above = _shifted(registers["psum"], np.zeros(cols, dtype), "down")
        top_row = np.arange(rows)[:, None] == 0
        cycle.require_mac("psum", psum, above, x, w, "(psum from above) + x*w", {
            "the top row starts every partial sum from 0, since nothing comes from above it":
                np.where(top_row, registers["psum"] + x * w, np.nan),
            "you kept the partial sum in place, as an output-stationary accumulator would (here partial sums "
            "move down)": registers["psum"] + x * w,
            "you multiplied the x from before this cycle's move (values move first, then each PE multiplies "
            "what has just arrived)": above + registers["x"] * w,
        })
        registers = {"w": w, "x": x.astype(dtype), "psum": psum.astype(dtype)}
        x_m = _shifted(sources["x"], left_k, "right")
        psum_m = _shifted(sources["psum"], np.full(cols, BUBBLE), "down")
        terms = _shifted(sources["terms"], np.zeros(cols, np.int64), "down")
        real = (x_m >= 0) & weighted
        starts = real & (psum_m == BUBBLE)
        busy = starts | (real & (psum_m == x_m))
        for i, j in np.argwhere(real & (psum_m >= 0) & (psum_m != x_m)):
            trace.mismatches.append(f"cycle {t}: PE({i}, {j}) added A[{x_m[i, j]}, {i}] * B[{i}, {j}] to the partial "
                                    f"sum of C[{psum_m[i, j]}, {j}]")
        sources = {"w": sources["w"], "x": x_m, "psum": np.where(starts, x_m, psum_m), "terms": terms + busy}
        trace._record("compute", registers, sources, busy)
        for j in range(n):  # the bottom row's partial sums leave the array
            m = sources["psum"][rows - 1, j]
            if m >= 0:
                output[m, j] = registers["psum"][rows - 1, j]
                delivered[m, j] = sources["terms"][rows - 1, j] == k
        if delivered.all():
            trace.complete = True
            break
    trace.output = output
