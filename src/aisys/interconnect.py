"""Links between chips and between machines: bandwidth per direction, with the document each figure comes from.

Collectives are priced per direction: in a ring every GPU sends to one neighbour while
it receives from the other, so the figure that bounds a ring's bus bandwidth is the
one-way bandwidth. Vendors usually quote the two directions added together (NVLink 4's
"900 GB/s"); `bandwidth` here is always one way.
"""

from dataclasses import dataclass

GB = 1e9


@dataclass(frozen=True)
class Link:
    name: str
    bandwidth: float  # bytes/s, one direction
    source: str
    derivation: str = ""


LINKS = {link.name: link for link in (
    Link("NVLink 4 (H100/H200 SXM)", 450 * GB,
         "NVIDIA H100 Tensor Core GPU datasheet and H200 datasheet: 'NVLink: 900GB/s' (both directions).",
         "18 links x 25 GB/s per direction"),
    Link("NVLink 3 (A100 SXM)", 300 * GB,
         "NVIDIA A100 Tensor Core GPU datasheet: 'NVLink: 600GB/s' (both directions).",
         "12 links x 25 GB/s per direction"),
    Link("NVLink 5 (B200)", 900 * GB,
         "NVIDIA Blackwell architecture technical brief: fifth-generation NVLink, 1.8 TB/s per GPU (both directions).",
         "18 links x 50 GB/s per direction"),
    Link("PCIe 4.0 x16", 16e9 * 16 * 128 / 130 / 8,
         "PCI-SIG, PCI Express Base Specification 4.0: 16 GT/s per lane, 128b/130b encoding.",
         "16 GT/s x 16 lanes x 128/130 / 8 bits"),
    Link("PCIe 5.0 x16", 32e9 * 16 * 128 / 130 / 8,
         "PCI-SIG, PCI Express Base Specification 5.0: 32 GT/s per lane, 128b/130b encoding.",
         "32 GT/s x 16 lanes x 128/130 / 8 bits"),
    Link("InfiniBand HDR", 200e9 / 8,
         "NVIDIA ConnectX-6 VPI adapter datasheet: 200 Gb/s HDR InfiniBand per port.",
         "200 Gb/s per port per direction"),
    Link("InfiniBand NDR", 400e9 / 8,
         "NVIDIA ConnectX-7 adapter datasheet: 400 Gb/s NDR InfiniBand per port.",
         "400 Gb/s per port per direction"),
    Link("Ethernet 100GbE", 100e9 / 8, "IEEE 802.3ba/802.3bj: 100 Gb/s Ethernet.",
         "100 Gb/s per direction"),
    Link("NVLink bridge (H100 NVL, PCIe cards)", 300 * GB,
         "NVIDIA H100 NVL datasheet: 'NVLink: 600GB/s' (both directions) between a pair of PCIe cards.",
         "600 GB/s both directions / 2"),
    Link("Ethernet 400GbE (RoCE)", 400e9 / 8,
         "IEEE 802.3bs-2017: 400 Gb/s Ethernet; NVIDIA ConnectX-7 datasheet: 400GbE with RoCE.",
         "400 Gb/s per direction"),
)}

# The link that joins the GPUs of one board, by chip name (aisys.hardware.CHIPS).
GPU_LINK = {
    "NVIDIA H100 SXM5 80GB": "NVLink 4 (H100/H200 SXM)",
    "NVIDIA H200 SXM 141GB": "NVLink 4 (H100/H200 SXM)",
    "NVIDIA A100 SXM4 80GB": "NVLink 3 (A100 SXM)",
}

# The latencies NCCL's tuning model charges an all-reduce by a ring, in seconds, from NCCL's source:
# NVIDIA/nccl, src/graph/tuning.cc, ncclTunerConstantsDefaults (v2.30.7; the ring's values are the same
# since v2.19). A ring all-reduce on p GPUs of one node is charged NCCL_RING_BASE_LATENCY[protocol] once
# plus 2(p-1) steps of NCCL_RING_STEP_LATENCY[link][protocol]; steps between nodes are charged the
# "network" value. The three protocols trade latency for bandwidth: LL carries 4 bytes of data in each
# 8-byte store (the model halves its bandwidth), LL128 120 in each 128 (the model takes 0.92 of it), and
# Simple all of it, with a memory fence per chunk.
NCCL_RING_BASE_LATENCY = {"LL": 6.6e-6, "LL128": 14.0e-6, "Simple": 8.4e-6}  # baseLatencies, Ring row
NCCL_RING_STEP_LATENCY = {  # hwLatencies[link][Ring]
    "NVLink": {"LL": 0.6e-6, "LL128": 1.9e-6, "Simple": 3.4e-6},
    "PCIe": {"LL": 1.0e-6, "LL128": 2.5e-6, "Simple": 5.7e-6},
    "network": {"LL": 2.7e-6, "LL128": 4.0e-6, "Simple": 14.0e-6},
}
NCCL_BANDWIDTH_SHARE = {"LL": 0.5, "LL128": 0.92, "Simple": 1.0}  # of the ring's bus bandwidth, in the model
