// The argmax pool pair (tfplus/ops/argmax_pool_ops.py), built after nn.cl (its NCHW_SPLIT, AT and window_2x2_max). Taps in
// scan order (t >> 1: the row, t & 1: the column), as nn.cl's max_pool_2x2_argmax and max_pool_grad_2x2_argmax,
// with the ReLU's mask folded in: NO_GRADIENT (4) where the window's maximum is not > 0. Two windows a byte: window
// e of a row (NCHW order) in nibble e & 1 of byte e >> 1 of the row's `bytes`.

// The window of logical NCHW index i: y and its nibble.
inline uchar pool_window(__global T* y, __global const T* x, int i, int C, int8 geo, int4 xs, int4 ys) {
    NCHW_SPLIT(i, C, geo.s2, geo.s3, n, c, oh, ow);
    T m;
    uchar t = window_2x2_max(x, AT(xs, n, c, 2 * oh, 2 * ow), xs, &m);
    y[AT(ys, n, c, oh, ow)] = m;
    return m > 0 ? t : 4;
}

// One work-item per byte: its two windows.
#if WANT_max_pool_2x2_argmax_relu
__kernel void K(max_pool_2x2_argmax_relu)(GLOBAL(T, y), GLOBAL(uchar, argmax), GLOBAL(const T, x), int total,
                                          int C, int8 geo, int2 pad, int4 xs, int4 ys) {
    SHIFT(y); SHIFT(argmax); SHIFT(x);
    int j = get_global_id(0);
    if (j >= total) return;
    int per_row = C * geo.s2 * geo.s3, bytes = (per_row + 1) / 2;
    int n = j / bytes, e = 2 * (j - n * bytes);
    uchar b = pool_window(y, x, n * per_row + e, C, geo, xs, ys);
    if (e + 1 < per_row) b |= (uchar)(pool_window(y, x, n * per_row + e + 1, C, geo, xs, ys) << 4);
    argmax[j] = b;
}
#endif

// dx at each of the window's four taps: g * (tap is the nibble's), a multiply as max_pool_grad_2x2_argmax's.
#if WANT_relu_max_pool_grad_2x2_argmax
__kernel void K(relu_max_pool_grad_2x2_argmax)(GLOBAL(T, dx), GLOBAL(const T, g), GLOBAL(const uchar, argmax),
                                               int total, int C, int8 geo, int2 pad, int4 xs, int4 ys) {
    SHIFT(dx); SHIFT(g); SHIFT(argmax);
    int i = get_global_id(0);
    if (i >= total) return;
    NCHW_SPLIT(i, C, geo.s2, geo.s3, n, c, oh, ow);
    int per_row = C * geo.s2 * geo.s3, e = i - n * per_row;
    int a = (argmax[n * ((per_row + 1) / 2) + (e >> 1)] >> ((e & 1) * 4)) & 15;
    int yo = AT(ys, n, c, oh, ow), at = AT(xs, n, c, 2 * oh, 2 * ow);
    T gv = g[yo];
    for (int t = 0; t < 4; t++) dx[at + (t >> 1) * xs.s2 + (t & 1) * xs.s3] = gv * (T)(t == a);
}
#endif
