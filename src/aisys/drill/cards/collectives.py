"""Collectives: the α-β costs of ring, tree and doubling all-reduce (aisys.collectives.cost), bus bandwidth, the
links (aisys.interconnect), and what NCCL does that MPI did not."""

from aisys import prose
from aisys.collectives import busbw, cost
from aisys.collectives.simulated import naive_traffic
from aisys.dtypes import bytes_per_element
from aisys.inference.model import LLAMA_2_7B
from aisys.interconnect import LINKS, NCCL_RING_STEP_LATENCY

from ..card import Ask, Choice, Number, Several, card

RING = "06-collectives/ring"
COST = "06-collectives/cost-model"
ALGORITHMS = "06-collectives/algorithms"
TOPOLOGY = "06-collectives/topology"
PRIMITIVES = "06-collectives/primitives"
NVLINK = LINKS["NVLink 4 (H100/H200 SXM)"]
NVLINK_ALPHA = NCCL_RING_STEP_LATENCY["NVLink"]["Simple"]
NETWORK_ALPHA = NCCL_RING_STEP_LATENCY["network"]["Simple"]
GIB = 2**30


@card(topic="collectives", difficulty="easy", frequency="high", page=RING)
def ring_all_reduce_bytes_per_rank():
    p, n = 8, GIB
    _, sent = cost.terms("all_reduce", "ring", n, p)
    return Ask(
        f"A ring all-reduce of a 1 GiB buffer runs on {p} GPUs. How many bytes does each GPU send (in GiB)?",
        Number(sent / GIB, rel=0.01, unit="GiB"),
        f"The buffer is cut into p = {p} chunks of n/p. The reduce-scatter phase takes p - 1 = {p - 1} steps, each "
        f"sending one chunk, and the all-gather phase {p - 1} more: 2(p-1)/p x n = {2 * (p - 1)}/{p} GiB = "
        f"{sent / GIB:g} GiB, always less than 2n however many GPUs join. That is the least any all-reduce can "
        "move per rank while the ranks do the additions.")


@card(topic="collectives", difficulty="medium", frequency="high", page=COST)
def ring_all_reduce_time_nvlink():
    p, n = 8, GIB
    alpha, beta = NVLINK_ALPHA, 1 / NVLINK.bandwidth
    latency, volume = cost.terms("all_reduce", "ring", n, p)
    seconds = cost.time("all_reduce", "ring", n, p, alpha, beta)
    return Ask(
        f"By the α-β model, how long does a ring all-reduce of 1 GiB take on {p} H100s joined by NVLink 4 "
        f"({prose.rate(NVLINK.bandwidth, 'B/s')} per direction), with α = {prose.duration(alpha)} per step (NCCL's "
        "Simple protocol)? In ms.",
        Number(seconds * 10**3, rel=0.03, unit="ms"),
        f"t = 2(p-1) α + 2(p-1)/p n β = {latency} x {prose.duration(alpha)} + {volume / GIB:g} GiB / "
        f"{prose.rate(NVLINK.bandwidth, 'B/s')} = {prose.duration(latency * alpha)} + "
        f"{prose.duration(volume * beta)} = {prose.duration(seconds)}. At this size the bandwidth term is "
        "everything; the latency term matters for small buffers.")


@card(topic="collectives", difficulty="easy", frequency="medium", page=COST)
def bus_bandwidth_factor():
    p = 8
    factor = busbw.bus_factor("all_reduce", p)
    return Ask(
        f"nccl-tests reports an all-reduce on {p} GPUs at an algorithm bandwidth (buffer size / time) of algbw. "
        "By what factor must algbw be multiplied to get the bus bandwidth, comparable with one link's speed?",
        Number(factor, rel=0.01, unit="x"),
        f"busbw = algbw x 2(p-1)/p = algbw x {factor:g} for p = {p}: the fraction of the buffer each rank moves over "
        "its link in a ring. A busbw close to the link's one-way bandwidth means the collective runs at the "
        "hardware's speed, whatever p is.")


@card(topic="collectives", difficulty="hard", frequency="high", page=ALGORITHMS)
def small_message_all_reduce_algorithm():
    p, n = 64, 8 * 1024
    link = LINKS["InfiniBand NDR"]
    choices = ("ring", "tree", "recursive_doubling", "halving_doubling")
    times = {a: cost.time("all_reduce", a, n, p, NETWORK_ALPHA, 1 / link.bandwidth) for a in choices}
    best = min(times, key=times.get)
    return Ask(
        f"Which all-reduce algorithm does the α-β model find fastest for an 8 KiB buffer on {p} nodes over "
        f"InfiniBand NDR (α = {prose.duration(NETWORK_ALPHA)} per message)?",
        Choice(tuple(a.replace("_", " ") for a in choices), choices.index(best)),
        "Predicted: " + "; ".join(f"{a.replace('_', ' ')} {prose.duration(t)}" for a, t in times.items())
        + f". A small buffer is all latency: the ring's 2(p-1) = {2 * (p - 1)} steps cost "
        f"{prose.duration(2 * (p - 1) * NETWORK_ALPHA)} before a byte of bandwidth counts, recursive doubling "
        f"takes lg p = {p.bit_length() - 1} steps. For large buffers the ring (or halving-doubling) wins, moving "
        "2(p-1)/p n instead of lg p x n.")


@card(topic="collectives", difficulty="hard", frequency="medium", page=COST)
def ring_against_doubling_crossover():
    p = 8
    beta = 1 / NVLINK.bandwidth
    size = cost.crossover("all_reduce", "ring", "recursive_doubling", p, NVLINK_ALPHA, beta)
    ring_a, ring_b = cost.terms("all_reduce", "ring", 1, p)
    rd_a, rd_b = cost.terms("all_reduce", "recursive_doubling", 1, p)
    return Ask(
        f"On {p} GPUs over NVLink 4 ({prose.rate(NVLINK.bandwidth, 'B/s')} per direction, α = "
        f"{prose.duration(NVLINK_ALPHA)} per step), above what buffer size does a ring all-reduce beat recursive "
        "doubling, by the α-β model? In KiB.",
        Number(size / 1024, rel=0.03, unit="KiB"),
        f"Ring: {ring_a} α + {ring_b:g} n β. Recursive doubling: {rd_a} α + {rd_b:g} n β. Equal when "
        f"n = ({ring_a} - {rd_a}) α / (({rd_b:g} - {ring_b:g}) β) = {prose.rate(size, 'B')}, i.e. "
        f"{size / 1024:,.0f} KiB. The crossover scales with α/β, the bytes the link sends in one latency: a faster "
        "link pushes it up. NCCL switches protocol (LL, LL128) before algorithm for small messages.")


@card(topic="collectives", difficulty="easy", frequency="high", page=TOPOLOGY)
def gpu_collective_library():
    options = ("NCCL (and its AMD counterpart RCCL)", "OpenMP", "gRPC", "POSIX shared memory")
    return Ask(
        "Besides MPI, which communication library do GPU training frameworks (PyTorch's distributed backend) use "
        "for collectives between NVIDIA GPUs?",
        Choice(options, 0),
        "NCCL, the NVIDIA Collective Communication Library: torch.distributed's 'nccl' backend. It detects the "
        "topology (NVLink, NVSwitch, PCIe, NICs), builds rings and trees over it, and runs each collective as "
        "CUDA kernels on a stream, so communication overlaps compute. AMD's RCCL and Huawei's HCCL follow the same "
        "design; MPI remains common for launching jobs and on CPU clusters, and Gloo is PyTorch's CPU backend.")


@card(topic="collectives", difficulty="medium", frequency="medium", page=TOPOLOGY)
def what_nccl_does():
    options = ("detects the topology and builds rings and trees over NVLink, PCIe and the NICs",
               "runs reductions in CUDA kernels on the GPU, on a CUDA stream",
               "chooses algorithm and protocol (LL, LL128, Simple) per call from a cost model",
               "moves data between nodes with GPUDirect RDMA, NIC to GPU memory",
               "copies every buffer to host memory before sending it",
               "needs the CPU to add the partial sums")
    return Ask(
        "Which of these does NCCL do?",
        Several(options, frozenset({0, 1, 2, 3})),
        "NCCL builds a graph of GPUs, switches and NICs at start-up and searches rings and trees through it; each "
        "collective is a kernel (one thread block per channel) that reads, reduces and writes GPU memory, ordered "
        "on a stream; a latency-bandwidth model picks the algorithm and protocol for each call (its ring step on "
        f"NVLink costs {prose.duration(NCCL_RING_STEP_LATENCY['NVLink']['LL'])} with LL and "
        f"{prose.duration(NVLINK_ALPHA)} with Simple); across nodes the NIC reads and writes GPU memory directly "
        "(GPUDirect RDMA). Nothing is staged through the host, and the CPU does no arithmetic.")


@card(topic="collectives", difficulty="easy", frequency="high", page=PRIMITIVES)
def all_reduce_decomposition():
    options = ("reduce-scatter, then all-gather", "all-gather, then scatter", "broadcast, then reduce",
               "all-to-all, then broadcast")
    p = 8
    return Ask(
        "All-reduce can be built from two other collectives, which is how the ring does it. Which two?",
        Choice(options, 0),
        f"After a reduce-scatter rank r holds block r of the sum; an all-gather then gives every block to every "
        f"rank. Each phase moves {cost.formula('reduce_scatter', 'ring')[1]} x n per rank "
        f"({prose.significant(cost.terms('reduce_scatter', 'ring', 1, p)[1])} n for p = {p}). Reduce then broadcast "
        "also works (a parameter server) but loads the root's link with (p-1) n. ZeRO and FSDP use the two halves "
        "separately.")


@card(topic="collectives", difficulty="easy", frequency="medium", page=TOPOLOGY)
def nvlink_against_pcie():
    pcie = LINKS["PCIe 5.0 x16"]
    ratio = NVLINK.bandwidth / pcie.bandwidth
    return Ask(
        "How many times the one-way bandwidth of a PCIe 5.0 x16 link is an H100 SXM's NVLink 4?",
        Number(ratio, rel=0.03, unit="x"),
        f"NVLink 4: {NVLINK.derivation} = {prose.rate(NVLINK.bandwidth, 'B/s')} per direction (the datasheet's "
        f"'{prose.rate(2 * NVLINK.bandwidth, 'B/s')}' adds both). PCIe 5.0 x16: {pcie.derivation} = "
        f"{prose.rate(pcie.bandwidth, 'B/s')}. Ratio {prose.times(ratio)}: why tensor parallelism stays inside an "
        "NVLink domain.")


@card(topic="collectives", difficulty="hard", frequency="high", page=COST)
def gradient_all_reduce_7b():
    p = 8
    n = LLAMA_2_7B.parameter_count() * bytes_per_element("bf16")
    seconds = cost.time("all_reduce", "ring", n, p, NVLINK_ALPHA, 1 / NVLINK.bandwidth)
    return Ask(
        f"Data-parallel training of Llama-2-7B on {p} H100s all-reduces its BF16 gradients every step over NVLink 4. "
        "By the α-β model with a ring, how long does that take (in ms)?",
        Number(seconds * 10**3, rel=0.03, unit="ms"),
        f"{LLAMA_2_7B.parameter_count():,} parameters x {bytes_per_element('bf16'):g} bytes = "
        f"{prose.rate(n, 'B')}. 2(p-1)/p x n / {prose.rate(NVLINK.bandwidth, 'B/s')} + 2(p-1) α = "
        f"{prose.duration(seconds)}. DDP hides most of it by all-reducing buckets of gradients while backward "
        "still runs.")


@card(topic="collectives", difficulty="easy", frequency="medium", page=ALGORITHMS)
def ring_latency_terms():
    p = 64
    ring, _ = cost.terms("all_reduce", "ring", 1, p)
    tree, _ = cost.terms("all_reduce", "tree", 1, p)
    return Ask(
        f"A ring all-reduce on {p} ranks: how many message latencies (α terms) lie on its critical path?",
        Number(ring, rel=0.01, unit="α"),
        f"2(p-1) = {ring}: p-1 steps of reduce-scatter and p-1 of all-gather, each waiting for the previous. A "
        f"binomial tree (reduce then broadcast) needs 2 ceil(lg p) = {tree}, recursive doubling lg p = "
        f"{cost.terms('all_reduce', 'recursive_doubling', 1, p)[0]}: why trees win small messages at scale and "
        "NCCL joins nodes with a double binary tree.")


@card(topic="collectives", difficulty="hard", frequency="medium", page=COST)
def cross_node_ring_all_reduce():
    nodes, n = 16, GIB
    link = LINKS["InfiniBand NDR"]
    seconds = cost.time("all_reduce", "ring", n, nodes, NETWORK_ALPHA, 1 / link.bandwidth)
    nvlink = cost.time("all_reduce", "ring", n, nodes, NVLINK_ALPHA, 1 / NVLINK.bandwidth)
    latency, volume = cost.terms("all_reduce", "ring", n, nodes)
    return Ask(
        f"{nodes} nodes, one InfiniBand NDR port each, run a ring all-reduce of 1 GiB between them (α = "
        f"{prose.duration(NETWORK_ALPHA)} per step, NCCL's network value). How long does it take by the α-β "
        "model, in ms?",
        Number(seconds * 10**3, rel=0.03, unit="ms"),
        f"NDR: {link.derivation} = {prose.rate(link.bandwidth, 'B/s')}. {volume / GIB:g} GiB at that rate = "
        f"{prose.duration(volume / link.bandwidth)}, plus {latency} x {prose.duration(NETWORK_ALPHA)} = "
        f"{prose.duration(latency * NETWORK_ALPHA)}: {prose.duration(seconds)}; the same ring over NVLink 4 would "
        f"take {prose.duration(nvlink)}. Real clusters give every GPU its own NIC and run one ring per NIC.")


@card(topic="collectives", difficulty="medium", frequency="low", page=PRIMITIVES)
def parameter_server_root_traffic():
    p, n = 8, GIB
    root = naive_traffic("all_reduce", p, n)
    return Ask(
        f"A parameter server all-reduces a 1 GiB gradient from {p} ranks by reduce then broadcast through one "
        "root. How many bytes does the root receive (in GiB)?",
        Number(root.received[0] / GIB, rel=0.01, unit="GiB"),
        f"Every other rank sends it its whole buffer: (p-1) n = {root.received[0] / GIB:g} GiB in, and as much out "
        f"for the broadcast, while each other link carries n. The ring moves 2(p-1)/p n = "
        f"{cost.terms('all_reduce', 'ring', n, p)[1] / GIB:g} GiB per rank, on every link evenly: the root's link "
        f"carries {root.busiest / cost.terms('all_reduce', 'ring', n, p)[1]:.1f} times as much, and the gap grows "
        "with p.")
