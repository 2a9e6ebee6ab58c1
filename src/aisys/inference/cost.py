"""What one forward step of a decoder costs, in FLOPs and bytes, for a batch that mixes prefill and decode.

An inference engine runs the model one step at a time over a batch of sequences; in a step,
sequence i brings `new` tokens (its whole prompt or a chunk of it when prefilling, one token when
decoding) and has `cached` tokens of keys and values from earlier steps. The costs follow the
roofline's convention (`aisys.roofline`): minimum traffic, every weight read once per step, the
cached keys and values read once and the new ones written once. Activations are left out: at
these shapes they are small next to the weights and the cache.
"""

from .._validate import nonnegative_int
from ..dtypes import bytes_per_element
from ..hardware import Chip
from ..roofline import Cost, classify
from .kv_cache import kv_bytes_per_token
from .model import ModelConfig


def matmul_parameters(config: ModelConfig) -> int:
    """Weights that every token multiplies through in the transformer blocks (not the embedding lookup, not the
    norms)."""
    kv_width = config.n_kv_heads * config.head_dim
    per_layer = 2 * config.d_model * config.d_model + 2 * config.d_model * kv_width + 3 * config.d_model * config.d_ff
    return config.n_layers * per_layer


def step_cost(config: ModelConfig, batch, dtype: str = "bf16") -> Cost:
    """FLOPs and bytes of one step over `batch`, a list of (new, cached) token counts per sequence.

    FLOPs: 2 per weight per new token in the blocks; the output layer only for each sequence's last
    token (the only logits sampling needs); attention 4 x nh x hs per (query, key) pair per layer
    (q.k and p.v), where a new token sees the cached tokens, the new ones before it and itself.
    """
    pairs = _check_batch(batch)
    size = bytes_per_element(dtype)
    new = sum(n for n, _ in pairs)
    attended = sum(n * c + n * (n + 1) // 2 for n, c in pairs)
    flops = (2 * matmul_parameters(config) * new + 2 * config.d_model * config.vocab_size * len(pairs)
             + 4 * config.n_layers * config.n_heads * config.head_dim * attended)
    weights = (matmul_parameters(config) + config.d_model * config.vocab_size) * size
    cache = kv_bytes_per_token(config, dtype) * sum(n + c for n, c in pairs)
    return Cost(flops=flops, bytes=weights + cache)


def step_seconds(config: ModelConfig, batch, chip: Chip, dtype: str = "bf16") -> float:
    """The roofline's lower bound on one step's time on `chip`: the slower of compute and memory."""
    cost = step_cost(config, batch, dtype)
    return classify(cost, chip.peak(dtype), chip.memory_bandwidth)["seconds"]


def _check_batch(batch) -> list[tuple[int, int]]:
    try:
        pairs = [tuple(pair) for pair in batch]
    except TypeError:
        raise TypeError(f"batch must be a list of (new, cached) token counts, got {batch!r:.80}") from None
    if not pairs:
        raise ValueError("batch must hold at least one sequence")
    checked = []
    for i, pair in enumerate(pairs):
        if len(pair) != 2:
            raise ValueError(f"batch[{i}] must be a (new, cached) pair of token counts, got {pair!r}")
        new = nonnegative_int(f"batch[{i}] new tokens", pair[0])
        cached = nonnegative_int(f"batch[{i}] cached tokens", pair[1])
        checked.append((new, cached))
    return checked
