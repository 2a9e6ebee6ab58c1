"""Vision: convolution's shapes and costs (aisys.conv, as chapter 3 lowers a convolution to a GEMM) and the box
arithmetic of detection (aisys.interview.detection, the IoU and NMS drills' answer keys)."""

import numpy as np

from aisys import conv, prose
from aisys.hardware import CHIPS
from aisys.interview.detection import box_iou, nms

from ..card import Ask, Number, Several, card

CONVOLUTION = "03-tensor-cores/convolution"
BANK = "09-drills/bank"
H100 = CHIPS["NVIDIA H100 SXM5 80GB"]


@card(topic="vision", difficulty="easy", frequency="high", page=CONVOLUTION)
def conv_output_size():
    size, kernel, stride, padding = 224, 7, 2, 3
    out = conv.output_size(size, kernel, stride, padding)
    return Ask(
        f"ResNet's first layer convolves a {size} x {size} image with a {kernel} x {kernel} kernel, stride {stride} "
        f"and padding {padding}. How many pixels wide is its output?",
        Number(out, rel=0, abs=0.5, unit="pixels"),
        f"out = floor((size + 2 padding - dilation (kernel - 1) - 1) / stride) + 1 = floor(({size} + {2 * padding} - "
        f"{kernel - 1} - 1) / {stride}) + 1 = {out}.")


@card(topic="vision", difficulty="medium", frequency="medium", page=CONVOLUTION)
def im2col_memory_expansion():
    size, kernel = 56, 3
    expansion = conv.im2col_expansion(size, size, kernel, 1, 1)
    return Ask(
        f"A {kernel} x {kernel} convolution, stride 1, padding 1, runs on {size} x {size} feature maps by im2col. "
        "How many times the input's size is the matrix im2col builds?",
        Number(expansion, rel=0.02, unit="times"),
        f"Every output pixel gets a column of the {kernel} x {kernel} input values it sees, so each input value is "
        f"copied into up to {kernel * kernel} columns: {prose.significant(expansion)} times the input here (a little "
        "less at the borders for larger strides or no padding). That copy is why cuDNN's implicit GEMM forms the "
        "columns in shared memory instead of in HBM.")


@card(topic="vision", difficulty="hard", frequency="medium", page=CONVOLUTION)
def resnet_conv_intensity():
    x, w = (1, 256, 56, 56), (256, 256, 3, 3)
    cost = conv.conv2d_cost(x, w, 1, 1, dtype="bf16")
    intensity = cost.flops / cost.bytes
    return Ask(
        f"A BF16 3 x 3 convolution with 256 input and 256 output channels runs on one {x[2]} x {x[3]} image "
        "(stride 1, padding 1). Counting its input, weights and output once each, what is its arithmetic intensity "
        "in FLOP/byte?",
        Number(intensity, rel=0.05, unit="FLOP/byte"),
        f"{prose.significant(cost.flops / 10**9)} GFLOP (2 x {x[2]} x {x[3]} x {w[0]} x {w[1]} x {w[2] * w[3]}) over "
        f"{prose.significant(cost.bytes / 2**20)} MiB of input, weights and output: {intensity:.0f} FLOP/byte, "
        f"{'above' if intensity > H100.ridge_point('bf16') else 'below'} the H100's ridge of "
        f"{H100.ridge_point('bf16'):.0f}: a 3 x 3 convolution reuses each weight at every pixel and each input at "
        "every output channel, so it is compute-bound when its im2col columns are not written to memory.")


@card(topic="vision", difficulty="medium", frequency="low", page=CONVOLUTION)
def winograd_multiplication_saving():
    direct, fast = conv.direct_multiplications(2, 3, dims=2), conv.winograd_multiplications(2, 3, dims=2)
    return Ask(
        "Winograd's F(2x2, 3x3) computes a 2 x 2 output tile of a 3 x 3 convolution. How many times fewer "
        "multiplications does it need than the direct method?",
        Number(direct / fast, rel=0.01, unit="times"),
        f"Direct: each of the 4 outputs takes 9 multiplications, {direct}. Winograd: (m + r - 1)^2 = {fast} "
        f"element-wise products in the transformed domain, {direct / fast:g} times fewer (Lavin and Gray, 2016). The "
        "transforms add additions, and the saving grows with the tile at the cost of precision.")


@card(topic="vision", difficulty="easy", frequency="high", page=BANK)
def iou_of_offset_squares():
    a, b = np.array([[0, 0, 4, 4]], dtype=float), np.array([[2, 2, 6, 6]], dtype=float)
    iou = float(box_iou(a, b)[0, 0])
    return Ask(
        "What is the IoU of the boxes (0, 0, 4, 4) and (2, 2, 6, 6), given as corners (x1, y1, x2, y2)?",
        Number(iou, rel=0.01),
        f"The intersection is (2, 2, 4, 4), area 4; the union is 16 + 16 - 4 = 28: IoU = 4 / 28 = {iou:.3f}. Two "
        "boxes each shifted by half their side overlap far less than half.")


@card(topic="vision", difficulty="medium", frequency="high", page=BANK)
def nms_keeps_in_a_chain():
    boxes = np.array([[0, 0, 10, 10], [4, 0, 14, 10], [9, 0, 19, 10], [0, 0, 10, 10]], dtype=float)
    scores = np.array([9, 8, 7, 6]) / 10
    threshold = 3 / 10
    kept = [int(i) for i in nms(boxes, scores, threshold)]
    ious = box_iou(boxes, boxes)
    options = tuple(f"box {i} {tuple(int(v) for v in boxes[i])}, score {scores[i]:g}" for i in range(len(boxes)))
    steps = []
    for i in range(len(boxes)):  # the scores are in descending order already
        by = next((k for k in kept if k < i and ious[k, i] > threshold), None)
        above = [j for j in range(i) if ious[j, i] > threshold]
        if by is None and above:
            steps.append(f"box {i} overlaps box {above[0]} with IoU {ious[above[0], i]:.2f}, but box {above[0]} was "
                         f"suppressed and suppresses nothing: kept")
        elif by is None:
            steps.append(f"box {i} is kept")
        else:
            steps.append(f"box {i} overlaps kept box {by} with IoU {ious[by, i]:.2f} > {threshold:g}: suppressed")
    return Ask(
        f"Greedy NMS with IoU threshold {threshold:g} (suppress when IoU > threshold) runs on these boxes, corners "
        "(x1, y1, x2, y2). Which are kept?",
        Several(options, frozenset(kept)),
        "By descending score: " + "; ".join(steps) + ". Letting a suppressed box suppress others (which would lose "
        "the last box of a chain) is the commonest NMS bug.")
