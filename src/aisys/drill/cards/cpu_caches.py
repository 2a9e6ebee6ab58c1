"""CPU caches, counted by aisys.cpu_cache: the address split, conflict misses of power-of-two strides, LRU, row against
column traffic, the write-allocate traffic of a store loop, and the tile that fits a cache (chapter 1's caches page).
MESI, false sharing and the sorts' cache behaviour are cards.cpu's."""

import math

from aisys import cpu_cache
from aisys.hardware import CPU_CACHE_LINE_BYTES

from ..card import Ask, Choice, Number, card

PAGE = "01-architecture/caches"
KIB = 1024
DOUBLE = 8


def _traffic(result: dict) -> int:
    return result["bytes_read"] + result["bytes_written"]


@card(topic="architecture", difficulty="easy", frequency="high", page=PAGE)
def set_index_bits():
    size, ways, line = 48 * KIB, 12, CPU_CACHE_LINE_BYTES
    sets = size // (line * ways)
    address = 3 * sets * line + 5 * line + 9  # tag 3, set 5, offset 9: the split below shows it
    tag, index, offset = cpu_cache.split_address(address, size=size, line=line, ways=ways)
    return Ask(
        f"An L1 data cache holds {size // KIB} KiB, {ways}-way set-associative, with {line}-byte lines. How many "
        "bits of an address select the set?",
        Number(int(math.log2(sets)), rel=0.01, unit="bits"),
        f"Sets = size / (line x ways) = {size} / ({line} x {ways}) = {sets}, so log2 {sets} = "
        f"{int(math.log2(sets))} bits, just above the {int(math.log2(line))} offset bits (log2 {line}); the tag is "
        f"every bit from bit {int(math.log2(sets * line))} up. For example address {address} splits into tag "
        f"{tag}, set {index}, offset {offset}. The 12 ways make the cache larger without adding index bits, which "
        "keeps the set index within the 4 KiB page offset (so the cache can be indexed before the address is "
        "translated).")


@card(topic="architecture", difficulty="medium", frequency="medium", page=PAGE)
def conflict_misses_of_a_power_of_two_stride():
    size, ways, line = 32 * KIB, 8, CPU_CACHE_LINE_BYTES
    stride = size // ways  # 4 KiB: the distance between addresses of one set
    cols = stride // DOUBLE

    def second_pass_hits(rows):
        column = [r * stride for r in range(rows)]
        return cpu_cache.simulate(column * 2, size=size, line=line, ways=ways)["hits"] == rows

    kept = max(r for r in range(1, 65) if second_pass_hits(r))
    return Ask(
        f"A {size // KIB} KiB, {ways}-way cache with {line}-byte lines. A loop walks down a column of a row-major "
        f"float64 matrix with {cols} columns (rows {stride // KIB} KiB apart), then walks it again. At most how many "
        "rows can the column have for the second walk to hit on every element?",
        Number(kept, rel=0.01, unit="rows"),
        f"The cache has {size // (line * ways)} sets, so addresses {stride} bytes apart (sets x line) fall into "
        f"the same set: every element of the column competes for the {ways} ways of one set, while the other sets "
        f"stay empty. {kept} rows fit; one more and LRU evicts each line just before it is needed (conflict "
        "misses). Padding each row by one line (a leading dimension of cols + 8) spreads the column over all "
        "sets, which is why BLAS and FFT libraries avoid power-of-two leading dimensions.")


@card(topic="architecture", difficulty="easy", frequency="high", page=PAGE)
def row_against_column_traffic():
    n = 64
    geometry = {"size": 4 * KIB, "line": CPU_CACHE_LINE_BYTES, "ways": 4}
    row = _traffic(cpu_cache.simulate(cpu_cache.traversal(n, n, "row"), **geometry))
    column = _traffic(cpu_cache.simulate(cpu_cache.traversal(n, n, "column"), **geometry))
    return Ask(
        f"Summing a large row-major float64 matrix, how many times as many bytes does a column-by-column loop "
        f"bring from memory as a row-by-row loop, with {CPU_CACHE_LINE_BYTES}-byte lines, once a column's lines "
        "exceed the cache (and ignoring prefetching)?",
        Number(column / row, rel=0.02, unit="x"),
        f"Row order uses all {CPU_CACHE_LINE_BYTES // DOUBLE} doubles of each line it fetches; column order fetches a "
        f"line for one double, and the line is evicted before the next column needs it. Simulated on a {n} x {n} "
        f"matrix in a {geometry['size'] // KIB} KiB cache: {row} bytes against {column}, "
        f"{column / row:.0f} times. Swapping the loops (or transposing once) fixes it.")


@card(topic="architecture", difficulty="medium", frequency="medium", page=PAGE)
def write_allocate_doubles_the_traffic():
    geometry = {"size": 1 * KIB, "line": CPU_CACHE_LINE_BYTES, "ways": 2}
    array = 16 * KIB  # 16 times the cache
    addresses = cpu_cache.traversal(1, array // DOUBLE, "row")
    result = cpu_cache.simulate(addresses, [True] * len(addresses), **geometry)
    options = ("1x the array: each byte is written once",
               f"{_traffic(result) / array:.0f}x the array: each line is read (write-allocate), then written back",
               "0.5x: the cache merges stores", "it depends on the values written")
    return Ask(
        "A loop stores to every element of an array much larger than the caches (writes only, no reads in the "
        "program). With a write-back, write-allocate cache, how much memory traffic does it cause?",
        Choice(options, 1),
        f"A store that misses fetches the line first (write-allocate: {result['bytes_read']} bytes read for a "
        f"{array}-byte array in the simulator), and the dirty line is written back when evicted "
        f"({result['bytes_written']} bytes): {_traffic(result) / array:.0f} times the array. Non-temporal "
        "(streaming) stores, or a full-line write the core can recognise, skip the read, which is why memset and "
        "memcpy of large buffers use them.")


@card(topic="architecture", difficulty="medium", frequency="high", page=PAGE)
def tile_that_fits_the_l1():
    l1 = 32 * KIB
    b = math.isqrt(l1 // (3 * DOUBLE))
    return Ask(
        f"A blocked float64 matrix multiply keeps one b x b tile of each of A, B and C in a {l1 // KIB} KiB L1 "
        "cache. What is the largest integer b for which the three tiles fit?",
        Number(b, rel=0.01, unit=""),
        f"3 b^2 x {DOUBLE} bytes <= {l1} gives b^2 <= {l1 // (3 * DOUBLE)}, b = {b}. Each element loaded then serves "
        f"b = {b} multiply-adds instead of one. In practice a smaller tile (a power of two below it, and a "
        "multiple of the vector width) leaves room for the stack and the conflict misses of LRU's approximation, "
        "and BLAS libraries block for registers, L1, L2 and L3 separately.")


@card(topic="architecture", difficulty="easy", frequency="medium", page=PAGE)
def lru_against_fifo():
    line = CPU_CACHE_LINE_BYTES
    a, b, c = 0, line, 2 * line
    stream = [a, b, a, c, a]
    geometry = {"size": 2 * line, "line": line, "ways": 2}
    lru = cpu_cache.simulate(stream, **geometry)["hits"]
    fifo = cpu_cache.simulate(stream, **geometry, policy="fifo")["hits"]
    return Ask(
        "Lines A, B and C map to the same set of a 2-way cache, which starts empty. The accesses are A, B, A, C, A. "
        "How many hit under LRU replacement?",
        Number(lru, rel=0.01, unit="hits"),
        f"A and B miss and fill the set; A hits and becomes the most recent; C misses and evicts B, the least "
        f"recently used; A hits: {lru} hits. FIFO would evict A, the first filled, and the last access would miss "
        f"({fifo} hit). Hardware approximates LRU with a few bits per set (tree pseudo-LRU), exact LRU being costly "
        "for many ways.")
