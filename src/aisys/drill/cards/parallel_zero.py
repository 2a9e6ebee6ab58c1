"""ZeRO and FSDP: bytes of model states per parameter, what each stage partitions and what it leaves per GPU, the
communication of stages 1-2 against stage 3, the shard of an uneven vector, and offloading's PCIe bound
(aisys.parallel.zero, aisys.mixed_precision, aisys.interconnect, aisys.hardware)."""

from aisys import prose
from aisys.hardware import CHIPS
from aisys.interconnect import LINKS
from aisys.mixed_precision import training_bytes_per_parameter

from ..card import Ask, Choice, Number, Several, card

PAGE = "05-parallel-training/zero"
H100 = CHIPS["NVIDIA H100 SXM5 80GB"]
GB = 10**9


@card(topic="parallel training", difficulty="easy", frequency="high", page=PAGE)
def bytes_per_parameter_mixed_precision_adam():
    total = training_bytes_per_parameter()
    return Ask(
        "Mixed-precision training with Adam, plain data parallelism: how many bytes of model states (weights, "
        "gradients, optimizer state; no activations) does each parameter cost on every GPU?",
        Number(total, rel=0, abs=0.5, unit="bytes"),
        f"fp16 weights 2 + fp16 gradients 2 + the optimizer's fp32 master weights 4, momentum 4 and variance 4 "
        f"(K = 12) = {total:g} bytes (ZeRO, section 3.1). Three quarters of it is optimizer state, which a rank "
        "needs only for the parameters it updates: that is what ZeRO's stage 1 partitions.")


@card(topic="parallel training", difficulty="medium", frequency="high", page=PAGE)
def zero_stage_memory_7_5b_64_gpus():
    from aisys.parallel import zero
    psi, n = 75 * 10**8, 64  # the paper's example (Figure 1)
    need = [zero.memory_per_gpu(psi, n, stage) / GB for stage in range(4)]
    return Ask(
        "A 7.5-billion parameter model trained in mixed precision with Adam on 64 data-parallel GPUs with ZeRO "
        "stage 2 (optimizer state and gradients partitioned): how many GB of model states per GPU?",
        Number(need[2], rel=0.02, unit="GB"),
        f"Stage 2 keeps the fp16 parameters whole (2Ψ) and 1/N of the gradients and optimizer state: "
        f"2Ψ + (2 + 12)Ψ/N = {need[2]:.1f} GB. The paper's Figure 1: plain data parallelism {need[0]:.0f} GB, "
        f"stage 1 {need[1]:.1f} GB, stage 3 {need[3]:.2f} GB.")


@card(topic="parallel training", difficulty="medium", frequency="high", page=PAGE)
def zero_communication_volume():
    options = ("2Ψ for stages 1 and 2, 3Ψ for stage 3",
               "2Ψ for every stage",
               "2Ψ for stage 1, 3Ψ for stages 2 and 3",
               "Ψ for stages 1 and 2 (only a reduce-scatter), 2Ψ for stage 3")
    return Ask(
        "Plain data parallelism all-reduces Ψ gradient elements per step, 2Ψ of traffic per rank (a reduce-scatter "
        "and an all-gather). What do ZeRO's stages move per step and rank?",
        Choice(options, 0),
        "Stages 1 and 2 reduce-scatter the gradients (Ψ) and all-gather the updated parameters (Ψ): the all-reduce's "
        "two halves, split around the optimizer step, so 2Ψ, no more than data parallelism. Stage 3 all-gathers the "
        "parameters before the forward pass and again before the backward pass, since they were freed in between, "
        "and reduce-scatters the gradients: 3Ψ (ZeRO, section 7.2).")


@card(topic="parallel training", difficulty="easy", frequency="high", page=PAGE)
def what_each_stage_partitions():
    options = ("the optimizer state (master weights, Adam's moments)", "the gradients", "the fp16 parameters",
               "the activations")
    return Ask(
        "ZeRO stage 2 (P_os+g): which of these does each rank keep only 1/N of?",
        Several(options, frozenset({0, 1})),
        "Stage 1 partitions the optimizer state, stage 2 the gradients too, stage 3 the parameters too. Activations "
        "are not model states: ZeRO-R's activation partitioning (and checkpointing) deals with them separately.")


@card(topic="parallel training", difficulty="medium", frequency="medium", page=PAGE)
def shard_length_with_padding():
    from aisys.parallel import zero
    numel, p = 58, 4
    size = zero.shard_size(numel, p)
    return Ask(
        f"A model's parameters flatten to {numel} elements, sharded over {p} ranks as FSDP's FlatParameter and "
        "DeepSpeed do (equal contiguous shards, the vector padded at its end). How many elements does each rank's "
        "Adam exp_avg hold?",
        Number(size, rel=0, abs=0.5, unit="elements"),
        f"Every shard has ceil({numel} / {p}) = {size} elements, so one all-gather of {size * p} puts each rank's "
        f"piece at r·{size}; the last shard holds {numel - (p - 1) * size} parameters and "
        f"{size * p - numel} of padding, which stays zero. Rank r's exp_avg and exp_avg_sq are {size} long each: "
        "1/p of the whole, plus the padding.")


@card(topic="parallel training", difficulty="hard", frequency="low", page=PAGE)
def offload_tokens_to_hide_pcie():
    pcie = LINKS["PCIe 5.0 x16"]
    flops = H100.peak("bf16")
    tokens = flops / (3 * pcie.bandwidth)
    return Ask(
        "ZeRO-Offload keeps Adam on the CPU: each step the GPU sends 2Ψ bytes of fp16 gradients over PCIe 5.0 x16 "
        "and receives 2Ψ bytes of fp16 parameters (the directions overlap). The step's compute is 6Ψ FLOPs per "
        "token at an H100's dense BF16 peak. From how many tokens per GPU per step can compute hide the transfers?",
        Number(tokens, rel=0.05, unit="tokens"),
        f"Hidden when 6ΨT / F >= 2Ψ / B, so T >= F / (3B): F = {prose.rate(flops, 'FLOP/s')}, B = "
        f"{prose.rate(pcie.bandwidth, 'B/s')} per direction, T >= {tokens:,.0f} tokens, whatever Ψ. ZeRO-Offload's "
        "one-step delayed parameter update hides the CPU's Adam, not the link.")


@card(topic="parallel training", difficulty="medium", frequency="medium", page=PAGE)
def fsdp_sharding_strategy_for_zero2():
    options = ("SHARD_GRAD_OP", "FULL_SHARD", "NO_SHARD", "HYBRID_SHARD")
    return Ask(
        "Which FSDP sharding strategy keeps the parameters whole from the forward pass to the backward pass, so "
        "there is no second all-gather (ZeRO-2's communication)?",
        Choice(options, 0),
        "SHARD_GRAD_OP reshards the parameters only after the backward pass: optimizer state and gradients are "
        "sharded, 2Ψ per step. FULL_SHARD is ZeRO-3 (frees after forward, gathers again for backward: 3Ψ), NO_SHARD "
        "is DDP, HYBRID_SHARD shards within a node and replicates across nodes (Zhao et al., VLDB 2023).")
