"""The online-softmax step every prefill-style kernel shares (FlashAttention-2's inner loop)."""
import triton
import triton.language as tl


@triton.jit
def online_softmax_step(q, k, v, visible, m_i, l_i, acc, qk_scale, DOT_PRECISION: tl.constexpr,
                        MASKED: tl.constexpr = True):
    """Fold one K/V tile into the running (max, sum, accumulator) of a block of query rows.

    Scores are kept in base 2 (``qk_scale`` has log2(e) folded in) so the update uses exp2;
    ``visible`` [BLOCK_M, BLOCK_N] masks keys a row may not see; ``MASKED=False`` says every key
    of the tile is visible, so the select is left out (the hot loop of a tiled kernel: the select
    costs about as much as the exp2 it guards). A caller must guarantee each row sees at least one
    key in its first tile, so the running max is finite from then on.
    """
    s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale
    if MASKED:
        s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
    return m_new, l_i, acc


@triton.jit
def online_softmax_fold(s, v, m_i, l_i, acc, DOT_PRECISION: tl.constexpr):
    """Fold a tile of base-2 scores ``s`` [BLOCK_M, BLOCK_N] (-inf where masked) and its values
    ``v`` [BLOCK_N, D] into the running state, for kernels whose rows may see nothing at all (a
    gathered list of -1s, an empty sequence, a split past a row's end): while a row's running max
    is -inf, 0 stands in for it, so no -inf - -inf is taken and the row keeps l = 0."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_use)
    p = tl.exp2(s - m_use[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
    return m_new, l_i, acc


@triton.jit
def softmax_finish(acc, m_i, l_i, v_scale):
    """(o, lse) of a running state: o = acc / l * v_scale, lse natural-log; a row that saw nothing
    gives o = 0 and lse = -inf."""
    nonempty = l_i > 0
    o = acc * (v_scale / tl.where(nonempty, l_i, 1.0))[:, None]
    lse = tl.where(nonempty, (m_i + tl.log2(tl.where(nonempty, l_i, 1.0))) * 0.6931471805599453, float("-inf"))
    return o, lse
