"""The memory of a large model from its configuration: GPT-3's training states and activations, the optimizer's
master weights, MoE total against active parameters, latent attention's cache and a sliding window's cap
(aisys.model_memory)."""

from aisys import model_memory as mm
from aisys import prose
from aisys.hardware import CHIPS

from ..card import Ask, Choice, Number, card

PAGE = "01-architecture/model-memory"
H100 = CHIPS["NVIDIA H100 SXM5 80GB"]
GB, TB, KB = 10**9, 10**12, 10**3


@card(topic="parallel training", difficulty="easy", frequency="high", page=PAGE)
def gpt3_training_states():
    n = mm.parameter_count(mm.GPT3_175B)["total"]
    memory = mm.training_memory(mm.GPT3_175B, 1, 2048, "full")
    states = memory["weights"] + memory["gradients"] + memory["optimizer"]
    return Ask(
        f"GPT-3 has {n / GB:.1f} billion parameters. Trained in mixed precision with Adam, how many TB do its "
        "weights, gradients and optimizer state take, before any activation?",
        Number(states / TB, rel=0.03, unit="TB"),
        f"16 bytes per parameter: bf16 weights (2) and gradients (2), fp32 master weights, momentum and variance "
        f"(4 + 4 + 4). 16 x {n:.4g} = {prose.rate(states, 'B')}: {states / H100.memory_bytes:.0f} H100s of 80 GB "
        "just to hold the states, which is why they are sharded (ZeRO).")


@card(topic="parallel training", difficulty="medium", frequency="high", page=PAGE)
def optimizer_without_master_weights():
    options = ("8: Adam's momentum and variance in fp32",
               "12: Adam's two fp32 moments and an fp32 master copy of the weights",
               "4: the fp32 master weights only",
               "16: everything Adam keeps")
    per = mm.OPTIMIZER_BYTES
    return Ask(
        "A memory calculator counts 8 bytes of optimizer state per parameter for mixed-precision Adam. How many "
        "does training keep, and what did it forget?",
        Choice(options, 1),
        f"{per} bytes: with bf16 weights, the optimizer also keeps an fp32 master copy (an update smaller than "
        "a bf16 weight's spacing would be lost), besides momentum and variance: 4 + 4 + 4. With the 2 bytes of "
        f"weights and 2 of gradients that is {mm.WEIGHT_BYTES + mm.GRADIENT_BYTES + per} bytes per parameter "
        "(ZeRO, section 3.1); 16 is the whole, not the optimizer's share.")


@card(topic="parallel training", difficulty="medium", frequency="medium", page=PAGE)
def gpt3_activations_full_recomputation():
    seq, config = 2048, mm.GPT3_175B
    full = mm.activation_bytes(config, 1, seq, "full")
    none = mm.activation_bytes(config, 1, seq, "none")
    return Ask(
        f"GPT-3 (96 layers, h = {config['hidden']}) trains with full activation recomputation: each layer keeps "
        f"only its bf16 input. How many GB of activations does one sequence of {seq} tokens keep?",
        Number(full / GB, rel=0.03, unit="GB"),
        f"2 bytes x h x s x L = 2 x {config['hidden']} x {seq} x {config['layers']} = {prose.rate(full, 'B')}. "
        f"Without recomputation each layer keeps 34 h + 5 a s bytes per token (Korthikanti et al.): "
        f"{prose.rate(none, 'B')}, most of it the attention scores; recomputation pays with a second forward pass.")


@card(topic="inference", difficulty="medium", frequency="high", page=PAGE)
def mixtral_active_parameters():
    counts = mm.parameter_count(mm.MIXTRAL_8X7B)
    config = mm.MIXTRAL_8X7B
    return Ask(
        f"Mixtral 8x7B has {counts['total'] / GB:.1f} billion parameters: {config['layers']} layers, each with "
        f"{config['experts']} SwiGLU experts of width {config['expert_ffn']} (h = {config['hidden']}), of which a "
        f"token uses {config['top_k']}. How many billion parameters does one token's forward pass use?",
        Number(counts["active"] / GB, rel=0.05, unit="billion"),
        f"{counts['active'] / GB:.1f} billion: attention, norms, embedding and head count whole; of the experts "
        f"(3 x h x f = {3 * config['hidden'] * config['expert_ffn'] / GB:.3f} billion each) only {config['top_k']} "
        f"of {config['experts']} per layer. The memory still holds all {counts['total'] / GB:.1f} billion: an "
        "MoE saves compute per token, not weights.")


@card(topic="inference", difficulty="medium", frequency="medium", page=PAGE)
def latent_attention_cache():
    config = mm.DEEPSEEK_V2
    mla = mm.kv_elements_per_token(config)
    mha = mm.kv_elements_per_token(dict(config, kv_rank=0, q_rank=0, rope_dim=0))
    return Ask(
        f"DeepSeek-V2's multi-head latent attention has {config['heads']} heads of {config['head_dim']}, a "
        f"compressed key-value latent of d_c = {config['kv_rank']} and a decoupled rotary key of d_h^R = "
        f"{config['rope_dim']}. How many elements does one token add to one layer's cache?",
        Number(mla, rel=0.01, unit="elements"),
        f"d_c + d_h^R = {config['kv_rank']} + {config['rope_dim']} = {mla}: the latent, from which every head's K "
        f"and V are projected up, and one rotary key shared by the heads (DeepSeek-V2, section 2.1). Full K and V "
        f"of {config['heads']} heads would be 2 x {config['heads']} x {config['head_dim']} = {mha}, "
        f"{mha / mla:.0f} times more.")


@card(topic="inference", difficulty="easy", frequency="medium", page=PAGE)
def sliding_window_cache_cap():
    config, tokens = mm.MISTRAL_7B, 32768
    cache = mm.kv_cache_bytes(config, 1, tokens)
    return Ask(
        f"Mistral 7B ({config['layers']} layers, {config['kv_heads']} kv heads of {config['head_dim']}, bf16) "
        f"uses sliding-window attention with a window of {config['window']} tokens. How many GB of KV cache does "
        f"one sequence of {tokens} tokens keep?",
        Number(cache / GB, rel=0.03, unit="GB"),
        f"A layer only attends to the last {config['window']} tokens, so its cache is a rolling buffer of that "
        f"many: 2 x {config['kv_heads']} x {config['head_dim']} x 2 bytes x {config['layers']} layers = "
        f"{mm.kv_elements_per_token(config) * 2 * config['layers'] / KB:.0f} kB per token, times "
        f"{config['window']}: {prose.rate(cache, 'B')}, not the {prose.rate(cache * tokens / config['window'], 'B')} "
        "a full-attention cache of the same shapes would hold.")
