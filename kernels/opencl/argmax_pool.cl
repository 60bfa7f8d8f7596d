// The argmax-byte pool pair (tfplus/ops/argmax_pool_ops.py), built after nn.cl (its NCHW_SPLIT, AT and NP_MAX).
// One work-item per 2x2 window; taps in scan order (t >> 1: the row, t & 1: the column), as nn.cl's
// max_pool_2x2_argmax and max_pool_grad_2x2_argmax, with the ReLU's mask folded into the byte: NO_GRADIENT (4)
// where the window's maximum is not > 0.

#if WANT_max_pool_2x2_argmax_relu
__kernel void K(max_pool_2x2_argmax_relu)(GLOBAL(T, y), GLOBAL(uchar, argmax), GLOBAL(const T, x), int total,
                                          int C, int8 geo, int2 pad, int4 xs, int4 ys) {
    SHIFT(y); SHIFT(argmax); SHIFT(x);
    int i = get_global_id(0);
    if (i >= total) return;
    NCHW_SPLIT(i, C, geo.s2, geo.s3, n, c, oh, ow);
    int at = AT(xs, n, c, 2 * oh, 2 * ow);
    T v[4] = {x[at], x[at + xs.s3], x[at + xs.s2], x[at + xs.s2 + xs.s3]};
    T m = NP_MAX(NP_MAX(v[0], v[2]), NP_MAX(v[1], v[3]));
    uchar t = 0;
    while (t < 3 && v[t] != m) t++;
    int yo = AT(ys, n, c, oh, ow);
    y[yo] = m;
    argmax[yo] = m > 0 ? t : 4;
}
#endif

// dx at each of the window's four taps: g * (tap is the byte's), a multiply as max_pool_grad_2x2_argmax's.
#if WANT_relu_max_pool_grad_2x2_argmax
__kernel void K(relu_max_pool_grad_2x2_argmax)(GLOBAL(T, dx), GLOBAL(const T, g), GLOBAL(const uchar, argmax),
                                               int total, int C, int8 geo, int2 pad, int4 xs, int4 ys) {
    SHIFT(dx); SHIFT(g); SHIFT(argmax);
    int i = get_global_id(0);
    if (i >= total) return;
    NCHW_SPLIT(i, C, geo.s2, geo.s3, n, c, oh, ow);
    int yo = AT(ys, n, c, oh, ow), at = AT(xs, n, c, 2 * oh, 2 * ow);
    int a = argmax[yo];
    T gv = g[yo];
    for (int t = 0; t < 4; t++) dx[at + (t >> 1) * xs.s2 + (t & 1) * xs.s3] = gv * (T)(t == a);
}
#endif
