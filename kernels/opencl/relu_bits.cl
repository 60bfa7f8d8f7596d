// A ReLU's mask as bits (tfplus/ops/relu_bits_ops.py): per row of `per_row` elements, `bytes` bytes, element e of
// the row in bit (e & 7) of byte (e >> 3).

#if WANT_relu_mask_bits
__kernel void K(relu_mask_bits)(GLOBAL(uchar, bits), GLOBAL(const T, f), int total, int per_row, int bytes) {
    SHIFT(bits); SHIFT(f);
    int i = get_global_id(0);
    if (i >= total) return;
    int n = i / bytes, j = i - n * bytes;
    uchar b = 0;
    for (int t = 0; t < 8; t++) {
        int e = j * 8 + t;
        if (e < per_row && f[(long)n * per_row + e] > 0) b |= (uchar)(1 << t);
    }
    bits[i] = b;
}
#endif

// dx = g * mask: a multiply, as ReluGrad's kernels (a negative g gives -0. where the mask is 0, a NaN g NaN).
#if WANT_relu_grad_bits
__kernel void K(relu_grad_bits)(GLOBAL(T, dx), GLOBAL(const T, g), GLOBAL(const uchar, bits), int total,
                                int per_row, int bytes) {
    SHIFT(dx); SHIFT(g); SHIFT(bits);
    int i = get_global_id(0);
    if (i >= total) return;
    int n = i / per_row, e = i - n * per_row;
    dx[i] = g[i] * (T)((bits[n * bytes + (e >> 3)] >> (e & 7)) & 1);
}
#endif
