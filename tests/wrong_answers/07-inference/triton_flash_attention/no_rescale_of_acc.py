"""Rescales l_i by alpha when the max grows but adds p @ v to the old accumulator unscaled: the early key blocks keep
their weight against a smaller max."""

FAILS = ["flash_forward", "flash_forward_causal", "flash_forward_large_logits", "flash_forward_gpu"]


@triton.jit  # noqa: F821
def flash_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, scale_log2, T_Q, T_K,
                           stride_qh, stride_qt, stride_kh, stride_kt,
                           HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,  # noqa: F821
                           BLOCK_N: tl.constexpr, PRECISION: tl.constexpr):  # noqa: F821
    tile = tl.program_id(0)  # noqa: F821
    bh = tl.program_id(1).to(tl.int64)  # noqa: F821
    offs_m = tile * BLOCK_M + tl.arange(0, BLOCK_M)  # noqa: F821
    offs_d = tl.arange(0, HEAD_DIM)  # noqa: F821
    rows_in = offs_m < T_Q
    q = tl.load(q_ptr + bh * stride_qh + offs_m[:, None] * stride_qt + offs_d[None, :], mask=rows_in[:, None],  # noqa: F821
                other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)  # noqa: F821
    l_i = tl.zeros([BLOCK_M], tl.float32)  # noqa: F821
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)  # noqa: F821
    offset = T_K - T_Q  # position of query 0
    end = T_K
    if CAUSAL:
        end = tl.minimum(T_K, offset + (tile + 1) * BLOCK_M)  # past the tile's last query: all masked  # noqa: F821
    for start_n in range(0, end, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)  # noqa: F821
        keys_in = offs_n < T_K
        k = tl.load(k_ptr + bh * stride_kh + offs_n[None, :] * stride_kt + offs_d[:, None], mask=keys_in[None, :],  # noqa: F821
                    other=0.0)
        v = tl.load(v_ptr + bh * stride_kh + offs_n[:, None] * stride_kt + offs_d[None, :], mask=keys_in[:, None],  # noqa: F821
                    other=0.0)
        s = tl.dot(q, k, input_precision=PRECISION) * scale_log2  # noqa: F821
        visible = keys_in[None, :]
        if CAUSAL:
            visible = visible & (offs_n[None, :] <= (offset + offs_m)[:, None])
        s = tl.where(visible, s, float("-inf"))  # noqa: F821
        m_new = tl.maximum(m_i, tl.max(s, 1))  # noqa: F821
        alpha = tl.exp2(m_i - m_new)  # noqa: F821
        p = tl.exp2(s - m_new[:, None])  # noqa: F821
        l_i = l_i * alpha + tl.sum(p, 1)  # noqa: F821
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=PRECISION)  # noqa: F821
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_ptr + bh * stride_qh + offs_m[:, None] * stride_qt + offs_d[None, :], out.to(o_ptr.dtype.element_ty),  # noqa: F821
             mask=rows_in[:, None])
    tl.store(lse_ptr + bh * T_Q + offs_m, (m_i + tl.log2(l_i)) * 0.6931471805599453, mask=rows_in)  # noqa: F821
