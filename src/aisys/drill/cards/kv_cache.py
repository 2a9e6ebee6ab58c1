"""The KV cache: its size for MHA and GQA models, how many sequences fit next to the weights, and why decode is
memory-bound (aisys.inference.kv_cache, aisys.inference.cost)."""

from dataclasses import replace

from aisys import prose
from aisys.dtypes import bytes_per_element
from aisys.hardware import CHIPS
from aisys.inference.cost import step_cost, step_seconds
from aisys.inference.kv_cache import kv_bytes_per_token, kv_cache_bytes, max_sequences
from aisys.inference.model import LLAMA_2_7B, LLAMA_2_70B, LLAMA_3_8B, LLAMA_3_70B
from aisys.roofline import classify

from ..card import Ask, Choice, Number, card

PAGE = "07-inference/kv-cache"
PREFILL_DECODE = "07-inference/prefill-decode"
H100 = CHIPS["NVIDIA H100 SXM5 80GB"]
BF16 = bytes_per_element("bf16")
KIB, GB = 1024, 10**9


def _per_token_text(config, dtype: str = "bf16") -> str:
    return (f"2 (K and V) x {config.n_layers} layers x {config.n_kv_heads} KV heads x {config.head_dim} x "
            f"{bytes_per_element(dtype):g} bytes = {kv_bytes_per_token(config, dtype):,.0f} bytes")


@card(topic="inference", difficulty="easy", frequency="high", page=PAGE)
def kv_bytes_per_token_llama_3_8b():
    per_token = kv_bytes_per_token(LLAMA_3_8B)
    return Ask(
        f"Llama-3-8B has {LLAMA_3_8B.n_layers} layers, {LLAMA_3_8B.n_heads} query heads, {LLAMA_3_8B.n_kv_heads} "
        f"key-value heads (GQA) and head size {LLAMA_3_8B.head_dim}. How many KiB of KV cache does one token take "
        "in BF16?",
        Number(per_token / KIB, rel=0.01, unit="KiB"),
        f"{_per_token_text(LLAMA_3_8B)} = {per_token / KIB:.0f} KiB per token. A sequence of "
        f"{LLAMA_3_8B.max_seq_len:,} tokens takes {prose.rate(per_token * LLAMA_3_8B.max_seq_len, 'B')}.")


@card(topic="inference", difficulty="medium", frequency="high", page=PAGE)
def gqa_cache_saving():
    config = LLAMA_2_70B
    mha = replace(config, n_kv_heads=config.n_heads)
    ratio = kv_bytes_per_token(mha) / kv_bytes_per_token(config)
    return Ask(
        f"Llama-2-70B uses grouped-query attention: {config.n_heads} query heads share {config.n_kv_heads} key-value "
        "heads. How many times smaller is its KV cache than with full multi-head attention?",
        Number(ratio, rel=0.01, unit="x"),
        f"The cache holds K and V per KV head: {_per_token_text(config)} per token, against "
        f"{kv_bytes_per_token(mha):,.0f} with {config.n_heads} KV heads: {ratio:g} times less, n_heads / "
        "n_kv_heads. The query heads of a group read the same keys and values, so decode also reads that much "
        "less cache per step; multi-query attention (one KV head) takes it to the limit.")


@card(topic="inference", difficulty="medium", frequency="high", page=PAGE)
def kv_cache_of_a_batch():
    config, tokens, batch = LLAMA_3_70B, 8192, 16
    total = kv_cache_bytes(config, tokens, batch)
    return Ask(
        f"How large is the BF16 KV cache of Llama-3-70B ({config.n_layers} layers, {config.n_kv_heads} KV heads of "
        f"size {config.head_dim}) for {batch} sequences of {tokens:,} tokens, in GB?",
        Number(total / GB, rel=0.02, unit="GB"),
        f"Per token: {_per_token_text(config)}. x {tokens:,} tokens x {batch} sequences = "
        f"{prose.rate(total, 'B')}, on top of {prose.rate(config.parameter_count() * BF16, 'B')} of weights: the "
        "cache, not the model, is what limits the batch at long context.")


@card(topic="inference", difficulty="hard", frequency="medium", page=PAGE)
def sequences_that_fit_on_an_h100():
    config, context = LLAMA_3_8B, 8192
    weights = config.parameter_count() * BF16
    fit = max_sequences(config, H100.memory_bytes, weights, context)
    return Ask(
        f"Llama-3-8B in BF16 is served on one {prose.rate(H100.memory_bytes, 'B')} H100. Ignoring activations and "
        f"other buffers, how many sequences of {context:,} tokens can it hold KV caches for at once?",
        Number(fit, rel=0.02, unit="sequences"),
        f"Weights: {config.parameter_count():,} x {BF16:g} bytes = {prose.rate(weights, 'B')}, leaving "
        f"{prose.rate(H100.memory_bytes - weights, 'B')}. One sequence: {context:,} x "
        f"{kv_bytes_per_token(config) / KIB:.0f} KiB = {prose.rate(kv_cache_bytes(config, context), 'B')}. "
        f"{fit} fit. Engines reserve a fraction of memory (vLLM's gpu_memory_utilization) for activations, so a "
        "few less in practice.")


@card(topic="inference", difficulty="easy", frequency="high", page=PREFILL_DECODE)
def weights_memory_7b():
    weights = LLAMA_2_7B.parameter_count() * BF16
    return Ask(
        "How much memory do the weights of Llama-2-7B take in BF16, in GB?",
        Number(weights / GB, rel=0.03, unit="GB"),
        f"{LLAMA_2_7B.parameter_count():,} parameters (embedding and output layer included) x {BF16:g} bytes = "
        f"{prose.rate(weights, 'B')}. Rule of thumb: {BF16:g} GB per billion parameters in BF16, "
        f"{bytes_per_element('int8'):g} in INT8 or FP8.")


@card(topic="inference", difficulty="hard", frequency="high", page=PREFILL_DECODE)
def batch_one_decode_speed():
    cached = 1024
    seconds = step_seconds(LLAMA_2_7B, [(1, cached)], H100)
    work = step_cost(LLAMA_2_7B, [(1, cached)])
    return Ask(
        f"At most how many tokens per second can one sequence of Llama-2-7B (BF16, {cached} tokens cached) be "
        "decoded at on an H100 SXM5, by the roofline?",
        Number(1 / seconds, rel=0.05, unit="tokens/s"),
        f"Each step reads all the weights and the cache, {prose.rate(work.bytes, 'B')}, to do "
        f"{prose.rate(work.flops, 'FLOP')}: an intensity of {work.intensity:.1f} FLOP/byte, memory-bound. "
        f"{prose.rate(work.bytes, 'B')} / {prose.rate(H100.memory_bandwidth, 'B/s')} = "
        f"{prose.duration(seconds)} per token, {1 / seconds:.0f} tokens/s. Only batching (or a smaller model, or "
        "fewer bytes per weight) raises it.")


@card(topic="inference", difficulty="hard", frequency="high", page=PREFILL_DECODE)
def prefill_and_decode_bounds():
    prompt, cached = 2048, 2048
    prefill = classify(step_cost(LLAMA_3_8B, [(prompt, 0)]), H100.peak("bf16"), H100.memory_bandwidth)
    decode = classify(step_cost(LLAMA_3_8B, [(1, cached)]), H100.peak("bf16"), H100.memory_bandwidth)
    options = ("prefill compute-bound, decode memory-bound", "both memory-bound", "both compute-bound",
               "prefill memory-bound, decode compute-bound")
    pair = (prefill["bound"], decode["bound"])
    answers = {("compute", "memory"): 0, ("memory", "memory"): 1, ("compute", "compute"): 2, ("memory", "compute"): 3}
    return Ask(
        f"On an H100, Llama-3-8B prefills a {prompt:,}-token prompt in one step, then decodes one token at a time "
        "(batch 1). Which is each phase bound by?",
        Choice(options, answers[pair]),
        f"Prefill pushes {prompt:,} tokens through every weight it reads: {prefill['intensity']:.0f} FLOP/byte, "
        f"past the ridge of {H100.ridge_point('bf16'):.0f}, {prose.duration(prefill['seconds'])}. A decode step "
        f"reads the same weights for one token: {decode['intensity']:.1f} FLOP/byte, "
        f"{prose.duration(decode['seconds'])} per token. Hence time to first token is set by compute and the time "
        "per output token by memory bandwidth.")


@card(topic="inference", difficulty="easy", frequency="high", page=PAGE)
def why_cache_keys_and_values():
    options = ("without it, every step recomputes the keys and values of the whole sequence: O(T^2) work for T "
               "tokens instead of O(T)",
               "it stores the attention weights so softmax runs once",
               "it caches the model's weights on the GPU",
               "it stores past logits so sampling is exact")
    per_token = kv_bytes_per_token(LLAMA_3_8B)
    return Ask(
        "Why do LLM inference engines keep a KV cache?",
        Choice(options, 0),
        "A token's key and value at every layer depend only on the tokens up to it (causal mask, rotary position "
        "of its own), so they never change. Caching them makes a decode step run one token through the model "
        "instead of the whole prefix. The price is memory that grows with every token: "
        f"{per_token / KIB:.0f} KiB per token for Llama-3-8B in BF16.")
