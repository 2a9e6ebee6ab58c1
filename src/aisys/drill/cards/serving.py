"""Serving many sequences: PagedAttention's blocks against contiguous reservations, copy-on-write, continuous
batching and chunked prefill, and Little's law for a server (aisys.inference.paged, aisys.inference.cost)."""

from aisys import prose
from aisys.dtypes import bytes_per_element
from aisys.hardware import CHIPS
from aisys.inference.cost import step_seconds
from aisys.inference.kv_cache import kv_bytes_per_token
from aisys.inference.model import LLAMA_2_7B, LLAMA_3_8B
from aisys.inference.paged import VLLM_BLOCK_SIZE as BLOCK
from aisys.inference.paged import BlockManager, blocks_for

from ..card import Ask, Choice, Number, Several, card

PAGED = "07-inference/paged-attention"
BATCHING = "07-inference/batching"
H100 = CHIPS["NVIDIA H100 SXM5 80GB"]


@card(topic="inference", difficulty="easy", frequency="high", page=PAGED)
def paged_slots_wasted():
    tokens = 1000
    blocks = blocks_for(tokens, BLOCK)
    return Ask(
        f"With PagedAttention blocks of {BLOCK} tokens, how many token slots does a sequence of {tokens} tokens hold "
        "but leave empty?",
        Number(blocks * BLOCK - tokens, rel=0.01, unit="slots"),
        f"It holds ceil({tokens} / {BLOCK}) = {blocks} blocks, {blocks * BLOCK} slots, for {tokens} tokens: "
        f"{blocks * BLOCK - tokens} empty, all in the last block. A paged sequence never wastes more than "
        f"{BLOCK - 1} slots, {prose.percent(blocks * BLOCK - tokens, blocks * BLOCK, 1)} of what it holds here.")


@card(topic="inference", difficulty="medium", frequency="high", page=PAGED)
def contiguous_reservation_usage():
    config, tokens = LLAMA_3_8B, 1000
    reserved = config.max_seq_len
    return Ask(
        f"A server without paging reserves a contiguous KV cache of the model's whole context "
        f"({reserved:,} tokens for Llama-3-8B) for each request. A request stops after {tokens} tokens. What "
        "fraction of its reservation held tokens (in %)?",
        Number(100 * tokens / reserved, rel=0.02, unit="%"),
        f"{tokens} / {reserved:,} = {prose.percent(tokens, reserved, 1)}; the rest, "
        f"{prose.rate((reserved - tokens) * kv_bytes_per_token(config), 'B')}, was reserved for tokens that never "
        f"came (internal fragmentation). Paged, it would hold {blocks_for(tokens, BLOCK)} blocks of {BLOCK}: "
        f"{prose.percent(tokens, blocks_for(tokens, BLOCK) * BLOCK, 1)} used. Kwon et al. found that most of the KV "
        "memory of earlier systems held no tokens.")


@card(topic="inference", difficulty="medium", frequency="medium", page=PAGED)
def waste_paging_removes():
    options = ("external fragmentation: gaps between sequences' arrays too small for a new one",
               "reservation for tokens a sequence has not generated yet",
               "internal fragmentation beyond the last, partly filled block",
               "the partly filled last block of each sequence",
               "the memory of the model's weights")
    return Ask(
        "Which kinds of KV-cache waste does PagedAttention remove?",
        Several(options, frozenset({0, 1, 2})),
        "Blocks are all one size, so any free block serves any sequence: no external fragmentation. A sequence "
        "takes a block only when its last one is full, so nothing is reserved ahead. What remains is the last "
        f"block's empty slots, under one block per sequence (at most {BLOCK - 1} tokens with blocks of {BLOCK}). "
        "Weights are untouched.")


@card(topic="inference", difficulty="medium", frequency="medium", page=PAGED)
def block_bytes_llama_3_8b():
    per_block = BLOCK * kv_bytes_per_token(LLAMA_3_8B)
    sequences = 256
    return Ask(
        f"How much memory is one {BLOCK}-token KV block of Llama-3-8B in BF16, across all layers, in MiB?",
        Number(per_block / 2**20, rel=0.01, unit="MiB"),
        f"{BLOCK} tokens x {kv_bytes_per_token(LLAMA_3_8B):,.0f} bytes per token (2 x {LLAMA_3_8B.n_layers} layers "
        f"x {LLAMA_3_8B.n_kv_heads} KV heads x {LLAMA_3_8B.head_dim} x {bytes_per_element('bf16'):g} bytes) = "
        f"{per_block / 2**20:g} MiB. With {sequences} sequences the worst-case waste is under {sequences} blocks, "
        f"{prose.rate(sequences * per_block, 'B')}.")


@card(topic="inference", difficulty="medium", frequency="medium", page=PAGED)
def larger_blocks():
    options = ("fewer block-table entries and longer contiguous reads for the attention kernel",
               "more empty slots in each sequence's last block",
               "less sharing of a common prefix, which is shared in whole blocks",
               "external fragmentation comes back",
               "the KV cache per token grows")
    return Ask(
        f"What changes when the PagedAttention block size grows (say from {BLOCK} to {8 * BLOCK} tokens)?",
        Several(options, frozenset({0, 1, 2})),
        f"A block of b tokens is one contiguous read per layer, so larger blocks suit the kernel; but a sequence "
        "wastes up to b - 1 slots, about b / 2 on average, and prefixes are shared only in whole blocks. Blocks "
        "stay all one size, so there is still no external fragmentation, and the bytes per token are the model's. "
        f"vLLM's default is {BLOCK}.")


@card(topic="inference", difficulty="hard", frequency="medium", page=PAGED)
def copy_on_write_blocks():
    block, prompt = 4, 6
    manager = BlockManager(num_blocks=16, block_size=block)
    manager.allocate(0, prompt)
    before = manager.num_blocks - manager.num_free_blocks
    manager.fork(0, 1)
    copies = manager.append(1)
    after = manager.num_blocks - manager.num_free_blocks
    return Ask(
        f"Blocks hold {block} tokens. Sequence 0 has a {prompt}-token prompt; it is forked into sequence 1 (parallel "
        "sampling), and sequence 1 then appends one token. How many physical blocks are in use?",
        Number(after, rel=0.01, unit="blocks"),
        f"The prompt takes ceil({prompt} / {block}) = {before} blocks. Fork copies the block table, not the blocks: "
        f"both tables point at the same {before}, with reference count 2. Sequence 1's append goes into its last "
        f"block, which is shared and partly filled, so it is copied first (copy-on-write, {len(copies)} copy) and "
        f"sequence 1 writes into its own copy: {after} blocks. A full shared block is never copied; a new token "
        "then starts a new block.")


@card(topic="inference", difficulty="easy", frequency="high", page=BATCHING)
def continuous_batching():
    options = ("the batch is rebuilt at every decode step: a finished sequence leaves and a waiting one joins at "
               "once", "requests are grouped by prompt length before the batch starts",
               "the batch runs until its longest sequence finishes, then a new batch starts",
               "each request gets its own GPU stream")
    return Ask(
        "What is continuous (iteration-level) batching?",
        Choice(options, 0),
        "Static batching keeps a batch until its longest sequence finishes, so short sequences' slots sit idle and "
        "new requests wait. Orca's iteration-level scheduling decides the batch at every step: sequences that hit "
        "their end token leave, queued ones join (prefill), as long as KV blocks are free. Since a decode step "
        "costs about the same for any batch below the ridge, every slot kept busy is throughput gained.")


@card(topic="inference", difficulty="hard", frequency="high", page=BATCHING)
def batching_throughput_gain():
    cached, batch = 1024, 64
    one = step_seconds(LLAMA_2_7B, [(1, cached)], H100)
    many = step_seconds(LLAMA_2_7B, [(1, cached)] * batch, H100)
    gain = (batch / many) / (1 / one)
    return Ask(
        f"By the roofline, how many times the decode throughput (tokens/s) of batch 1 does Llama-2-7B (BF16, "
        f"{cached} cached tokens per sequence) reach on an H100 with a batch of {batch}?",
        Number(gain, rel=0.05, unit="x"),
        f"Batch 1: {prose.duration(one)} per step, {1 / one:.0f} tokens/s. Batch {batch}: the weights are read once "
        f"for all {batch}, but each sequence's cache is read too: {prose.duration(many)} per step, "
        f"{batch / many:,.0f} tokens/s, {prose.times(gain)}. Not {batch}x, because with multi-head attention "
        "Llama-2-7B's caches grow with the batch; GQA models gain more.")


@card(topic="inference", difficulty="easy", frequency="medium", page=BATCHING)
def littles_law_for_a_server():
    rate, seconds = 20, 3
    return Ask(
        f"A server receives {rate} requests per second and each takes {seconds} s from arrival to its last "
        "token. In steady state, how many requests are in the server at once?",
        Number(rate * seconds, rel=0.01, unit="requests"),
        f"Little's law: items in the system = arrival rate x time in the system = {rate} x {seconds} = "
        f"{rate * seconds}. They all need KV cache at once, which sizes the memory; a latency that grows with load "
        "raises the count, and the cache, further.")


@card(topic="inference", difficulty="medium", frequency="medium", page=BATCHING)
def chunked_prefill():
    options = ("a long prompt's prefill would make one step long and stall every decoding sequence; cut into "
               "chunks, it shares steps with decodes and bounds the time per output token",
               "prefill of a long prompt does not fit the KV cache without chunks",
               "it makes prefill memory-bound",
               "it lets the prompt skip attention")
    return Ask(
        "Why do serving engines split a long prompt's prefill into chunks (chunked prefill)?",
        Choice(options, 0),
        "A step runs the whole batch; one long prefill in it makes that step take as long as the prefill, and "
        "every decoding sequence waits (a spike in time per output token). Chunked prefill (Sarathi-Serve, vLLM) "
        "gives each step a token budget: decodes first, then a chunk of the prompt. Each chunk attends to the "
        "chunks cached before it, so the result is the same; decodes, memory-bound, ride along with compute-bound "
        "prefill chunks, which uses the GPU better.")
