"""Shared memory banks: which access patterns conflict, and how padding and swizzles avoid it.

The counting is the simulator's (aisys.simt.analysis): 32 banks of 4-byte words, and a warp's access takes as many
passes (wavefronts) as the busiest bank has distinct words to deliver.
"""

from collections import Counter

from aisys import prose
from aisys.dtypes import bytes_per_element
from aisys.hardware import CHIPS, peak_formula
from aisys.occupancy import H100
from aisys.simt.analysis import BANK_BYTES, BANKS, WARP

from ..card import Ask, Choice, Number, Several, card

PAGE = "02-gpu-programming/shared-memory"
LANES = range(WARP)
H100_CHIP = "NVIDIA H100 SXM5 80GB"


def wavefronts(words) -> int:
    """Passes one warp-wide access takes: the most distinct 4-byte words any one bank must deliver."""
    return max(Counter(word % BANKS for word in set(words)).values())


def column_wavefronts(width: int, place=lambda row, col: col) -> int:
    """Passes to read column 0 of a 32-row float32 tile of `width` words per row, lane r reading row r."""
    return wavefronts(row * width + place(row, 0) for row in LANES)


@card(topic="memory access", difficulty="easy", frequency="medium", page=PAGE)
def bank_of_an_address():
    address = 1000
    word = address // BANK_BYTES
    return Ask(
        f"Shared memory on an NVIDIA GPU has {BANKS} banks of {BANK_BYTES}-byte words. Which bank holds byte "
        f"address {address}?",
        Number(word % BANKS, rel=0.01, unit=""),
        f"Successive words go to successive banks: bank = (address // {BANK_BYTES}) % {BANKS} = {word} % {BANKS} = "
        f"{word % BANKS}.")


@card(topic="memory access", difficulty="easy", frequency="high", page=PAGE)
def stride_two_conflict():
    ways = wavefronts(2 * lane for lane in LANES)
    return Ask(
        "Lane i of a warp reads the float32 s[2 * i] from shared memory. How many ways is the bank conflict (how "
        "many passes does the access take)?",
        Number(ways, rel=0.01, unit="-way"),
        f"Word 2i is in bank 2i % {BANKS}: the {WARP} lanes touch only the {BANKS // 2} even banks, two distinct "
        f"words in each, so the access takes {ways} passes, a {ways}-way conflict. Any even stride conflicts; a "
        "stride of 2^k words is a 2^k-way conflict up to 32.")


@card(topic="memory access", difficulty="medium", frequency="high", page=PAGE)
def conflicting_strides():
    strides = (1, 2, 3, 4, 8, 17, 32, 33)
    ways = {stride: wavefronts(stride * lane for lane in LANES) for stride in strides}
    options = tuple(f"s[{stride} * i]" for stride in strides)
    return Ask(
        "Lane i of a warp reads the 4-byte word s[stride * i]. For which strides is there a bank conflict?",
        Several(options, frozenset(i for i, stride in enumerate(strides) if ways[stride] > 1)),
        f"Lane i hits bank (stride x i) % {BANKS}. The {WARP} lanes cover {BANKS} / gcd(stride, {BANKS}) banks, "
        "so the conflict is gcd(stride, 32)-way: " + ", ".join(f"stride {s}: {w}-way" for s, w in ways.items())
        + ". Odd strides are conflict-free; that is why a tile padded to an odd row length works.")


@card(topic="memory access", difficulty="easy", frequency="high", page=PAGE)
def column_of_a_square_tile():
    ways = column_wavefronts(WARP)
    return Ask(
        f"A block holds a float32 tile s[{WARP}][{WARP}] in shared memory and lane r of a warp reads s[r][0] (a "
        "column). How many ways is the bank conflict?",
        Number(ways, rel=0.01, unit="-way"),
        f"s[r][0] is word {WARP} r, in bank ({WARP} r) % {BANKS} = 0 for every r: all {WARP} lanes want different "
        f"words of bank 0, {ways} passes. This is the transpose's problem; padding each row to {WARP + 1} words "
        f"puts s[r][0] in bank r % {BANKS}, one pass.")


@card(topic="memory access", difficulty="hard", frequency="high", page=PAGE)
def conflict_free_column_layouts():
    layouts = {f"float s[{WARP}][{WARP}] (plain)": column_wavefronts(WARP),
               f"float s[{WARP}][{WARP + 1}] (padded by one word)": column_wavefronts(WARP + 1),
               f"float s[{WARP}][{WARP + 2}] (padded by two words)": column_wavefronts(WARP + 2),
               f"float s[{WARP}][{WARP + 4}] (padded by four words)": column_wavefronts(WARP + 4),
               f"float s[{WARP}][{WARP}], element (r, c) stored at column c ^ r (XOR swizzle)":
                   column_wavefronts(WARP, lambda row, col: col ^ row)}
    options = tuple(layouts)
    return Ask(
        "Lane r of a warp reads element (r, 0) of a 32 x 32 float32 tile. With which layouts is this column read "
        "free of bank conflicts?",
        Several(options, frozenset(i for i, name in enumerate(options) if layouts[name] == 1)),
        "Passes per layout: " + "; ".join(f"{name}: {ways}" for name, ways in layouts.items()) + ". With W words "
        f"per row, element (r, 0) is in bank (W r) % {BANKS}: conflict-free exactly when W is odd. The XOR "
        "swizzle keeps 32 words per row (aligned rows for 16-byte accesses and TMA) and puts column c of row r in "
        f"bank c ^ r, which takes all {BANKS} values as r does.")


@card(topic="memory access", difficulty="easy", frequency="medium", page=PAGE)
def broadcast_of_one_word():
    passes = wavefronts([5] * WARP)
    options = (f"{WARP} passes: a {WARP}-way bank conflict", "1 pass: the word is broadcast to every lane",
               "2 passes, one per half-warp", "undefined: the lanes race on the word")
    return Ask(
        "Every lane of a warp reads the same float32 word of shared memory. How many passes does the access take?",
        Choice(options, 1 if passes == 1 else 0),
        f"A conflict needs different words in one bank. Lanes that read the same word share one delivery (a "
        f"broadcast): {passes} pass. Reads never race; only a write with other accesses to the same address does.")


@card(topic="memory access", difficulty="hard", frequency="low", page=PAGE)
def float64_row_wavefronts():
    words_per_double = int(bytes_per_element("fp64")) // BANK_BYTES
    passes = wavefronts(words_per_double * lane + part for lane in LANES for part in range(words_per_double))
    return Ask(
        "Lane i of a warp reads the float64 s[i] from shared memory (consecutive doubles). How many passes "
        "(wavefronts) does the access take, and is that a bank conflict?",
        Number(passes, rel=0.01, unit="passes"),
        f"A double is {words_per_double} words, so the warp reads {WARP * words_per_double} consecutive words, "
        f"{words_per_double} in every bank: {passes} passes. That is the fewest that "
        f"{WARP * words_per_double * BANK_BYTES} bytes can take at {BANKS} x {BANK_BYTES} bytes per pass, so it is "
        "not a conflict: profilers count passes beyond the minimum. The same holds for consecutive float4 "
        "accesses.")


@card(topic="memory access", difficulty="hard", frequency="low", page=PAGE)
def shared_memory_bandwidth_h100():
    clock = peak_formula(H100_CHIP, "fp32").ghz * 10**9
    hbm = CHIPS[H100_CHIP].memory_bandwidth
    per_clock = BANKS * BANK_BYTES
    total = H100.sms * per_clock * clock
    return Ask(
        f"What is the peak shared-memory bandwidth of a whole H100 SXM5 at its {prose.rate(clock, 'Hz')} boost "
        "clock, in TB/s?",
        Number(total / 10**12, rel=0.03, unit="TB/s"),
        f"Each SM's shared memory delivers {BANKS} banks x {BANK_BYTES} bytes = {per_clock} bytes per clock. "
        f"{H100.sms} SMs x {per_clock} B x {prose.rate(clock, 'Hz')} = {prose.rate(total, 'B/s')}, "
        f"{prose.rate_against(total, hbm, 'HBM bandwidth')}; but only without conflicts: a k-way conflict divides "
        "it by k.")
