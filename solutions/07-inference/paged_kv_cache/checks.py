"""Checks: a block manager with fork and copy-on-write, and paged attention.

The student's class is driven through the notebook's provided `run_operations(ops, num_blocks,
block_size)`, which returns, after each operation, what it raised, the copies it returned and
the manager's whole state as plain data. Here, on the grader's side, each operation's outcome is
compared with the reference manager's on the same operations: the same error or none (an
OutOfBlocks with the same needed and free, a ValueError whose message names the argument), the same
state up to the numbering of blocks (which sequences hold how many blocks, which they share, how
many are free), the invariants (`aisys.inference.paged.check_invariants`), a failed call leaving
the state as it was, and the contents: every token gets a distinct tag written into a pool
through the student's block tables, with the student's copies made first, and every live
sequence must read its own tags back. A failing run is shrunk to a short list of operations that
still fails, so the message shows the student a case small enough to trace by hand.
"""

import re

import numpy as np

from aisys.inference import paged as reference
from aisys.inference.paged_attention import paged_attention as reference_attention

from aisys_grader.checks import check
from aisys_grader.compare import (CheckFailure, assert_close, assert_format, describe, exception_name, redacting,
                                  shown, unredacted)


# ---------------------------------------------------------------------------------------------- the reference run

def _run_reference(ops: list, num_blocks: int, block_size: int) -> list[dict]:
    """What the notebook's run_operations returns, on the reference manager."""
    manager, results = reference.BlockManager(num_blocks, block_size), []
    for name, *args in ops:
        error, copies = None, []
        try:
            copies = getattr(manager, name)(*args) or []
        except reference.OutOfBlocks as e:
            error = ["OutOfBlocks", str(e), e.needed, e.free]
        except ValueError as e:
            error = ["ValueError", str(e)]
        results.append({"error": error, "copies": [list(c) for c in copies], "state": reference.state(manager)})
    return results


def _empty_state(num_blocks: int, block_size: int) -> dict:
    return reference.state(reference.BlockManager(num_blocks, block_size))


# ---------------------------------------------------------------------------------------------- comparing one step

def _structure(state: dict) -> tuple:
    """The state up to the numbering of blocks: blocks renamed in order of first appearance, sequence by sequence."""
    names: dict[int, int] = {}
    sequences = tuple((seq, tokens, tuple(names.setdefault(b, len(names)) for b in table))
                      for seq, tokens, table in state["sequences"])
    return sequences, len(state["free_blocks"])


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + "s" * (n != 1)


def _tables(state: dict) -> str:
    """Each sequence's tokens and blocks; inside `redacted()` the blocks by count only (their numbers are what the
    student's code returned)."""
    def blocks(table):
        return _count(len(table), "block") if redacting() else table

    return "{" + ", ".join(f"{seq}: {_count(tokens, 'token')} in {blocks(table)}"
                           for seq, tokens, table in state["sequences"]) + f"}}, {len(state['free_blocks'])} free"


def _structure_hint(got: dict, expected: dict) -> str:
    """Why the structure differs, from the first sequence that differs."""
    block_size = expected["block_size"]
    got_seqs = {s: table for s, _, table in got["sequences"]}
    for seq, tokens, table in expected["sequences"]:
        if seq not in got_seqs:
            return f"sequence {seq} is missing"
        mine = got_seqs[seq]
        if len(mine) > len(table):
            return (f"sequence {seq} holds {len(mine)} blocks for {tokens} tokens, where {len(table)} of {block_size} "
                    "hold them: take a new block only when the last one is full")
        if len(mine) < len(table):
            return f"sequence {seq} holds {len(mine)} blocks for {tokens} tokens: too few to hold them"
    shared_expected = sum(len(t) for _, _, t in expected["sequences"]) - (len(expected["ref_counts"]) -
                                                                           len(expected["free_blocks"]))
    shared_got = sum(len(t) for _, _, t in got["sequences"]) - (len(got["ref_counts"]) - len(got["free_blocks"]))
    if shared_got < shared_expected:
        return ("sequences share fewer blocks than they should: fork shares the parent's blocks (no copy), and only "
                "a shared, partly filled last block is copied when appended to")
    if shared_got > shared_expected:
        return ("sequences share more blocks than they should: a sequence appended to must not write into a "
                "partly filled block it shares (copy-on-write), and a freed block must not be handed out while held")
    return "the sequences share different blocks than they should"


def _error_problem(got, expected, op) -> str | None:
    """Inside `redacted()`, neither the student's error message nor the reference's (which quotes the case)."""
    if got is not None:
        got_text = f"{exception_name(got[0])}" if redacting() else f"{got[0]}: {got[1]}"
    if expected is not None:
        why = unredacted(f" ({expected[1]})")
    if expected is None and got is not None:
        return f"raised {got_text}, but the operation is valid"
    if expected is not None and expected[0] == "OutOfBlocks":
        if got is None:
            return (f"expected OutOfBlocks{why}, but it succeeded: the pool does not have the blocks, "
                    "so count them first and call _require(needed), which raises OutOfBlocks when too few are free")
        if got[0] != "OutOfBlocks":
            return f"expected OutOfBlocks{why}, got {got_text}"
        if got[2:] != expected[2:]:  # OutOfBlocks(needed, free): the numbers a scheduler reads
            fields = unredacted(f": expected needed={expected[2]}, free={expected[3]}, got needed="
                                f"{shown(got[2:3] and got[2], '!r')}, free={shown(got[3:4] and got[3], '!r')}")
            swapped = got[2:] == expected[:1:-1]
            return (f"OutOfBlocks carries the wrong numbers{fields}: "
                    + ("its arguments are swapped, the order is OutOfBlocks(needed, free)" if swapped else
                       "needed counts every block the call would take (the copy-on-write block too), free the "
                       "blocks on the free list; _require(needed) raises it before anything changes"))
    elif expected is not None:
        if got is None:
            return f"expected a ValueError{why}, but it succeeded"
        argument = expected[1].split()[0]  # every message of the reference's starts with the argument's name
        if got[0] != "ValueError":
            return f"expected a ValueError naming the argument `{argument}`{why}, got {got_text}"
        if not re.search(rf"\b{argument}\b", str(got[1])):
            return (f"the ValueError's message should name the argument `{argument}`, which is wrong"
                    + unredacted(f"; it says {got[1]!r}") + ": raise it with the provided _check_... helpers")
    return None


def _unchanged(before: dict, after: dict) -> bool:
    return ({**before, "free_blocks": sorted(before["free_blocks"])} ==
            {**after, "free_blocks": sorted(after["free_blocks"])})


def _copies_problem(op, got: dict, expected: dict, before: dict) -> str | None:
    copies, wanted = got["copies"], expected["copies"]
    if not isinstance(copies, list) or any(not (isinstance(c, list) and len(c) == 2) for c in copies):
        return f"append must return a list of (src_block, dst_block) pairs, got {shown(copies, '!r')}"
    if len(copies) != len(wanted):
        got_copies = unredacted(str(copies), f"{len(copies)} cop{'y' if len(copies) == 1 else 'ies'}")
        if wanted:
            return ("expected one copy (the last block is shared and partly filled: copy-on-write), got "
                    f"{got_copies}: return the copy the caller must make, or the new block holds nothing")
        return f"expected no copy, got {got_copies}: copy only a shared last block that is partly filled"
    if copies:
        seq = op[1]
        old = dict((s, t) for s, _, t in before["sequences"])[seq]
        new = dict((s, t) for s, _, t in got["state"]["sequences"])[seq]
        if copies[0] != [old[-1], new[len(old) - 1]]:
            if redacting():  # block numbers are what the student's code returned
                return "the copy should be (the shared last block, the block replacing it in the table)"
            return (f"the copy {copies[0]} should be (the shared last block {old[-1]}, the block replacing it "
                    f"{new[len(old) - 1]})")
    return None


class _Contents:
    """A pool of token tags written through the student's tables: copy-on-write must keep every sequence's tokens."""

    def __init__(self, num_blocks: int, block_size: int):
        self.pool = np.full((num_blocks, block_size), -1, np.int64)
        self.block_size, self.history, self.writer = block_size, {}, []

    def apply(self, index: int, op: list, result: dict, before: dict) -> str | None:
        tables = {s: t for s, _, t in result["state"]["sequences"]}
        name, seq = op[0], op[1]
        if name in ("allocate", "append"):
            for src, dst in result["copies"]:
                self.pool[dst] = self.pool[src]
            start = len(self.history.get(seq, []))
            tags = list(range(len(self.writer), len(self.writer) + op[2]))
            self.writer += [(index, seq)] * op[2]
            self._write(tables[seq], start, tags)
            self.history.setdefault(seq, []).extend(tags)
        elif name == "fork":
            self.history[op[2]] = list(self.history[seq])
        elif name == "free":
            del self.history[seq]
        return self._check(tables)

    def _write(self, table, start, tags):
        t = np.arange(start, start + len(tags))
        self.pool[np.asarray(table)[t // self.block_size], t % self.block_size] = tags

    def _check(self, tables) -> str | None:
        for seq, tags in self.history.items():
            t = np.arange(len(tags))
            read = self.pool[np.asarray(tables[seq], np.int64)[t // self.block_size], t % self.block_size]
            bad = np.flatnonzero(read != tags)
            if bad.size:
                token, found = int(bad[0]), int(read[bad[0]])
                if found < 0:
                    return (f"sequence {seq}'s token {token} is lost: its block was never written or copied (when a "
                            "sequence moves to a fresh block, return the copy (src, dst) so that its data follows)")
                op_index, writer = self.writer[found]
                return (f"sequence {seq}'s token {token} was overwritten by operation {op_index + 1}, which wrote a "
                        f"token of sequence {writer} into a block sequence {seq} shares: appending into a shared, "
                        "partly filled block must copy it first (copy-on-write)")
        return None


def _untouched_tables_changed(op: list, before: dict, after: dict) -> str | None:
    """An operation changes the table of its own sequence (and creates a fork's child) only: another sequence's table
    changing means the two share one list object."""
    touched = {op[1]} | ({op[2]} if op[0] == "fork" else set())
    old = {seq: table for seq, _, table in before["sequences"]}
    for seq, _, table in after["sequences"]:
        if seq not in touched and seq in old and table != old[seq]:
            other = unredacted(f"sequence {seq}", "another sequence")
            return (f"it changed the table of {other}, which it does not touch: the two tables are one list object; "
                    "fork must give the child its own list (list(parent's table)), sharing the blocks, not the list")
    return None


def _step_problem(index: int, op: list, got: dict, expected: dict, before: dict, contents: _Contents) -> str | None:
    """What is wrong with the student's outcome of one operation, or None."""
    if not isinstance(got, dict) or set(got) != {"error", "copies", "state"}:
        return "run_operations must return one dict per operation, as the provided one does"
    problem = _error_problem(got["error"], expected["error"], op)
    if problem:
        return problem
    if got["error"] is not None:
        if not _unchanged(before, got["state"]):
            return (f"it raised {got['error'][0]} but changed the state: {_tables(before)} became "
                    f"{_tables(got['state'])}; check everything (and count the blocks) before changing anything")
        return None
    problem = _untouched_tables_changed(op, before, got["state"])
    if problem:
        return problem
    try:
        reference.check_invariants(got["state"])
    except reference.InvariantError as error:  # its text quotes the student's block numbers
        broken = unredacted(f": {error}", " (reference counts, free list and tables disagree)")
        return f"an invariant is broken{broken}; _take must hand out the block on top of the free list with ref count 1"
    if _structure(got["state"]) != _structure(expected["state"]):
        return (f"expected (up to the numbering of blocks) {_tables(expected['state'])}; got {_tables(got['state'])}: "
                + _structure_hint(got["state"], expected["state"]))
    if op[0] == "append":
        problem = _copies_problem(op, got, expected, before)
        if problem:
            return problem
    return contents.apply(index, op, got, before)


def _first_problem(ops: list, got: list, num_blocks: int, block_size: int) -> tuple[int, str] | None:
    """(index, message) of the first operation the student's run gets wrong, or None."""
    expected = _run_reference(ops, num_blocks, block_size)
    if not isinstance(got, list) or len(got) != len(ops):
        return 0, f"run_operations must return one result per operation ({len(ops)})"
    before, contents = _empty_state(num_blocks, block_size), _Contents(num_blocks, block_size)
    for i, (op, mine, theirs) in enumerate(zip(ops, got, expected)):
        try:
            problem = _step_problem(i, op, mine, theirs, before, contents)
        except (KeyError, IndexError, TypeError, ValueError) as error:  # a state the checks cannot even read
            problem = "the state after it cannot be read" + unredacted(  # the state is what the student's code returned
                f" ({type(error).__name__}: {error}): {mine.get('state')}")
        if problem:
            return i, problem
        before = mine["state"]
    return None


def _shrink(student, ops: list, num_blocks: int, block_size: int, budget: int = 60) -> list:
    """A shorter list of operations that still fails (delta debugging, at most `budget` runs)."""
    def fails(candidate):
        got = student.call("run_operations", candidate, num_blocks, block_size, returns="list")
        return _first_problem(candidate, got, num_blocks, block_size) is not None

    chunk = max(len(ops) // 2, 1)
    while chunk >= 1 and budget > 0:
        start, removed = 0, False
        while start < len(ops) and budget > 0:
            candidate = ops[:start] + ops[start + chunk:]
            budget -= 1
            if candidate and fails(candidate):
                ops, removed = candidate, True
            else:
                start += chunk
        if not removed:
            chunk //= 2
    return ops


def _run_cases(student, cases: list, hidden: bool, *, shrink: bool = False) -> None:
    """Each case is (description, ops, num_blocks, block_size)."""
    for i, (what, ops, num_blocks, block_size) in enumerate(cases, 1):
        got = student.call("run_operations", ops, num_blocks, block_size, returns="list")
        found = _first_problem(ops, got, num_blocks, block_size)
        if found is None:
            continue
        index, problem = found
        label = (f"{'hidden case' if hidden else 'case'} {i} of {len(cases)} ({what}; {_count(num_blocks, 'block')} "
                 f"of {_count(block_size, 'token')}): operation {index + 1} of {len(ops)}, "
                 + unredacted(str(ops[index]), f"a call of {ops[index][0]}"))  # the operations are the hidden case
        failing = ops[:index + 1]
        if shrink and len(failing) > 3:
            short = _shrink(student, failing, num_blocks, block_size)
            index, problem = _first_problem(short, student.call("run_operations", short, num_blocks, block_size,
                                                                returns="list"), num_blocks, block_size)
            failing = short[:index + 1]
            replay = unredacted(f": run_operations({failing}, {num_blocks}, {block_size})")
            raise CheckFailure(f"{label} goes wrong. The shortest failing run found, {len(failing)} operations"
                               f"{replay}; its last operation: {problem}")
        raise CheckFailure(f"{label}: {problem}" + unredacted(f" (after {failing[:-1]})" if len(failing) > 1 else ""))


# ---------------------------------------------------------------------------------------------- random runs

def _random_ops(rng, count: int, num_blocks: int, block_size: int, *, fork: bool = True, bad: bool = False) -> list:
    """Mostly valid operations, chosen by following the reference manager: appends, prompts, forks, frees,
    with the pool small enough that it runs out now and then."""
    manager, ops, next_id = reference.BlockManager(num_blocks, block_size), [], 0
    kinds = ["allocate", "append", "fork", "free", "bad"]
    weights = np.array([0.2, 0.45, 0.15 if fork else 0, 0.15, 0.05 if bad else 0])
    for _ in range(count):
        live = sorted(manager.tables)
        kind = "allocate" if not live else str(rng.choice(kinds, p=weights / weights.sum()))
        if kind == "free" and len(live) < 3 and rng.random() < 0.5:
            kind = "append"
        seq = int(rng.choice(live)) if live else 0
        if kind == "allocate":
            op, next_id = ["allocate", next_id, int(rng.integers(1, 2 * block_size + 2))], next_id + 1
        elif kind == "append":
            op = ["append", seq, int(rng.integers(1, block_size + 2)) if rng.random() < 0.3 else 1]
        elif kind == "fork":
            op, next_id = ["fork", seq, next_id], next_id + 1
        elif kind == "free":
            op = ["free", seq]
        else:
            op = [["append", next_id + 5, 1], ["fork", next_id + 5, next_id + 6], ["free", next_id + 5],
                  ["allocate", seq, 1], ["append", seq, 0]][int(rng.integers(5))]
        try:
            getattr(manager, op[0])(*op[1:])
        except (reference.OutOfBlocks, ValueError):
            pass
        ops.append(op)
    return ops


# ---------------------------------------------------------------------------------------------- allocate and append

BIG_POOL = 160  # 40 operations never run out of it: those checks test one thing, out_of_blocks tests running out

APPEND_VISIBLE = [
    ("a prompt, then appends that fill the last block and open the next",
     [["allocate", 0, 5], ["append", 0, 1], ["append", 0, 2], ["append", 0, 1], ["allocate", 1, 1], ["free", 0],
      ["allocate", 2, 9], ["append", 1, 7]], 8, 4),
]
APPEND_HIDDEN = [
    ("block size 1", [["allocate", 0, 3], ["append", 0, 1], ["append", 0, 2], ["free", 0], ["allocate", 1, 2]], 8, 1),
    ("a prompt of exactly one block, then one more token", [["allocate", 0, 4], ["append", 0, 1]], 4, 4),
    ("one append spanning several blocks", [["allocate", 0, 1], ["append", 0, 10], ["append", 0, 5]], 6, 4),
    ("the whole pool in one prompt, freed and reused", [["allocate", 0, 12], ["free", 0], ["allocate", 1, 12]], 3, 4),
    ("a pool of one block", [["allocate", 0, 1], ["append", 0, 2], ["free", 0], ["allocate", 1, 3]], 1, 3),
]


@check(points=2)
def allocate_and_append(student, rng, hidden):
    """allocate and append take a new block only when the last is full; free returns the blocks."""
    cases = APPEND_VISIBLE
    if hidden:
        cases = APPEND_HIDDEN + [(f"random run {j + 1}, no forks", _random_ops(rng, 40, BIG_POOL, bs, fork=False),
                                  BIG_POOL, bs) for j, bs in enumerate((int(rng.integers(2, 6)), 16))]
    _run_cases(student, cases, hidden)


# ---------------------------------------------------------------------------------------------- fork and copy-on-write

FORK_VISIBLE = [
    ("two samples forked from a half-full prompt",
     [["allocate", 0, 6], ["fork", 0, 1], ["fork", 0, 2], ["append", 1, 1], ["append", 2, 3], ["append", 0, 1],
      ["free", 0], ["append", 1, 4]], 8, 4),
]
FORK_HIDDEN = [
    ("a fork of a full block: it stays shared, no copy", [["allocate", 0, 8], ["fork", 0, 1], ["append", 1, 1],
                                                            ["append", 0, 1]], 8, 4),
    ("the parent freed: the child owns the block alone, no copy", [["allocate", 0, 3], ["fork", 0, 1], ["free", 0],
                                                                  ["append", 1, 1]], 4, 4),
    ("a fork of a fork", [["allocate", 0, 5], ["fork", 0, 1], ["fork", 1, 2], ["append", 2, 1], ["append", 1, 1],
                          ["append", 0, 1], ["free", 1], ["free", 0], ["append", 2, 8]], 8, 4),
    ("block size 1: never a partly filled block", [["allocate", 0, 2], ["fork", 0, 1], ["append", 1, 1],
                                                   ["append", 0, 1], ["free", 1]], 8, 1),
    ("copy-on-write and a new block in one append", [["allocate", 0, 3], ["fork", 0, 1], ["append", 1, 6]], 8, 4),
    ("free a parent, then a child", [["allocate", 0, 5], ["fork", 0, 1], ["free", 0], ["free", 1],
                                     ["allocate", 2, 8]], 2, 4),
]


@check(points=3)
def fork_and_copy_on_write(student, rng, hidden):
    """fork shares blocks with counted references; appending to a shared, partly filled block copies it first."""
    cases = FORK_VISIBLE
    if hidden:
        cases = FORK_HIDDEN + [(f"random run {j + 1}", _random_ops(rng, 40, BIG_POOL, bs), BIG_POOL, bs)
                               for j, bs in enumerate((int(rng.integers(2, 5)), 16))]
    _run_cases(student, cases, hidden)


# ---------------------------------------------------------------------------------------------- out of blocks

OOM_VISIBLE = [
    ("the pool fills up exactly, then one block too many",
     [["allocate", 0, 8], ["allocate", 1, 5], ["append", 1, 3], ["append", 1, 1], ["allocate", 2, 1], ["free", 0],
      ["allocate", 2, 1]], 4, 4),
]
OOM_HIDDEN = [
    ("an append two blocks short, then one block short", [["allocate", 0, 3], ["append", 0, 9], ["append", 0, 5],
                                                         ["append", 0, 1]], 3, 4),
    ("copy-on-write with no free block", [["allocate", 0, 3], ["fork", 0, 1], ["allocate", 2, 4], ["append", 1, 1],
                                          ["free", 2], ["append", 1, 1]], 2, 4),
    ("copy-on-write plus a new block, one free", [["allocate", 0, 3], ["fork", 0, 1], ["append", 1, 5],
                                                  ["append", 1, 1]], 2, 4),
    ("a prompt larger than the pool", [["allocate", 0, 17], ["allocate", 0, 16]], 4, 4),
]


@check(points=2)
def out_of_blocks(student, rng, hidden):
    """OutOfBlocks is raised exactly when the free blocks do not suffice, and changes nothing."""
    cases = OOM_VISIBLE
    if hidden:
        cases = OOM_HIDDEN + [(f"random run {j + 1} on a small pool, no forks", _random_ops(rng, 60, 6, bs, fork=False),
                               6, bs) for j, bs in enumerate((2, 3))]
    _run_cases(student, cases, hidden)


# ---------------------------------------------------------------------------------------------- bad input

BAD_VISIBLE = [
    ("unknown sequences", [["allocate", 0, 3], ["append", 7, 1], ["fork", 7, 1], ["free", 7]], 4, 4),
]
BAD_HIDDEN = [
    ("a freed sequence", [["allocate", 0, 3], ["free", 0], ["append", 0, 1], ["fork", 0, 1], ["free", 0]], 4, 4),
    ("ids that exist", [["allocate", 0, 3], ["allocate", 1, 2], ["allocate", 0, 1], ["fork", 0, 1], ["fork", 1, 1]],
     4, 4),
    ("counts below 1", [["allocate", 0, 0], ["allocate", 0, 3], ["append", 0, 0], ["append", 0, -2]], 4, 4),
    ("a negative id", [["allocate", -1, 2], ["allocate", 0, 2], ["fork", 0, -1]], 4, 4),
]


@check(points=1)
def bad_input(student, rng, hidden):
    """Unknown or freed sequences, existing ids and counts below 1 raise ValueError and change nothing."""
    cases = BAD_VISIBLE
    if hidden:
        cases = BAD_HIDDEN
    _run_cases(student, cases, hidden)


# ---------------------------------------------------------------------------------------------- random operations

@check(points=3)
def random_operations(student, rng, hidden):
    """Long random runs of every operation: invariants, structure and contents after each, like the reference."""
    shapes = [(16, 4, 60)] if not hidden else [(32, 1, 150), (24, 2, 200), (20, 3, 200), (12, 16, 150)]
    cases = [(f"random run of {count} operations", _random_ops(rng, count, blocks, bs, bad=hidden), blocks, bs)
             for blocks, bs, count in shapes]
    _run_cases(student, cases, hidden, shrink=True)


# ---------------------------------------------------------------------------------------------- paged attention

ATTENTION_VISIBLE = [(2, 4, 2, 8, 4, [5, 8], "float32")]
ATTENTION_HIDDEN = [
    (1, 2, 1, 4, 4, [1], "float64"),  # one token: the new one
    (3, 4, 2, 8, 4, [4, 5, 13], "float32"),  # exactly a block, one more, several blocks and a bit
    (2, 8, 8, 16, 1, [3, 7], "float64"),  # block size 1, multi-head (nkv = nh)
    (2, 8, 1, 8, 16, [16, 17], "float32"),  # multi-query (nkv = 1), vLLM's block size
    (4, 6, 2, 4, 3, [1, 2, 3, 40], "float64"),  # ragged: 1 to 14 blocks
]


def _attention_case(rng, batch, n_heads, n_kv_heads, head_size, block_size, lens, dtype) -> dict:
    """Blocks handed out in a random order (tables non-contiguous, interleaved) and padded with other blocks."""
    needed = [reference.blocks_for(n, block_size) for n in lens]
    num_blocks = sum(needed) + 3
    max_blocks = max(needed) + int(rng.integers(0, 3))
    order = rng.permutation(num_blocks)
    tables = rng.integers(0, num_blocks, (batch, max_blocks)).astype(np.int64)  # padding: real blocks, wrong ones
    start = 0
    for b, n in enumerate(needed):
        tables[b, :n] = order[start:start + n]
        start += n
    cache = (num_blocks, block_size, n_kv_heads, head_size)
    return {"q": rng.standard_normal((batch, n_heads, head_size)).astype(dtype),
            "k_cache": rng.standard_normal(cache).astype(dtype), "v_cache": rng.standard_normal(cache).astype(dtype),
            "block_tables": tables, "context_lens": np.array(lens, np.int64)}


def _attention_hint(case: dict, got) -> str:
    """Which typical mistake the wrong output matches, if any."""
    lens, tables, block_size = case["context_lens"], case["block_tables"], case["k_cache"].shape[1]
    variants = {"it leaves out the new token's own key (context_lens includes it)": lens - 1,
                "it attends to every block in the table, padding included: read only context_lens[b] tokens":
                    np.full_like(lens, tables.shape[1] * block_size)}
    for hint, other in variants.items():
        if other.min() >= 1:
            try:
                guess = reference_attention(case["q"], case["k_cache"], case["v_cache"], tables, other)
            except ValueError:
                continue
            if np.allclose(got, guess, rtol=1e-4, atol=1e-4):
                return f": {hint}"
    n_heads, n_kv_heads = case["q"].shape[1], case["k_cache"].shape[2]
    modulo = np.arange(n_heads) % n_kv_heads  # query head h reading kv head h % nkv: one kv head per query head
    if np.allclose(got, reference_attention(case["q"], case["k_cache"][:, :, modulo], case["v_cache"][:, :, modulo],
                                            tables, lens), rtol=1e-4, atol=1e-4):
        return (": query head h reads key/value head h % nkv; the heads of a group are consecutive, so it is "
                "h // (nh // nkv)")
    contiguous = np.tile(np.arange(tables.shape[1]), (len(lens), 1)) % case["k_cache"].shape[0]
    if np.allclose(got, reference_attention(case["q"], case["k_cache"], case["v_cache"], contiguous, lens),
                   rtol=1e-4, atol=1e-4):
        return ": it reads blocks 0, 1, 2, ... instead of the blocks the table lists"
    return ""


@check(points=3)
def paged_attention(student, rng, hidden):
    """paged_attention reads each sequence's keys and values through its block table: equal to dense attention."""
    shapes = ATTENTION_HIDDEN if hidden else ATTENTION_VISIBLE
    for i, (batch, nh, nkv, hs, block_size, lens, dtype) in enumerate(shapes, 1):
        case = _attention_case(rng, batch, nh, nkv, hs, block_size, lens, dtype)
        expected = reference_attention(**case)
        label = (f"{'hidden case' if hidden else 'case'} {i} of {len(shapes)}: B={batch}, nh={nh}, nkv={nkv}, "
                 f"hs={hs}, block_size={block_size}, "
                 f"context_lens={unredacted(str(lens), describe(case['context_lens']))}, {dtype}")
        got = student.call("paged_attention", returns="array", **case)
        try:
            assert_format(got, case["q"].dtype.name)  # in q's dtype, the spec says
            assert_close(got, expected)
        except CheckFailure as failure:
            hint = _attention_hint(case, got) if got.shape == expected.shape else ""
            raise CheckFailure(f"{label}: {failure}{hint}") from None
