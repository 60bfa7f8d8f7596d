// nn ops other than convolutions: bias, pooling and its gradients, softmax and the fused cross-entropies.
// Pooling kernels index 4-D tensors logically as (n, c, h, w) through element strides (so NCHW and NHWC share
// them); a window's taps are scanned row-major, and padding taps are skipped (TF's rules: max ignores them,
// average divides by the taps inside the input only).

// out[i] = x[i] + bias[(i / inner) % C]
#if WANT_bias_add
__kernel void K(bias_add)(GLOBAL(T, out), GLOBAL(const T, x), GLOBAL(const T, bias), int n, int C, int inner) {
    SHIFT(out); SHIFT(x); SHIFT(bias);
    int i = get_global_id(0);
    if (i < n) out[i] = x[i] + bias[(i / inner) % C];
}
#endif

// (n, c, h, w) of logical NCHW index i over (C, H, W), and its offset under strides st = (sN, sC, sH, sW).
#define NCHW_SPLIT(i, C, H, W, n, c, h, w) \
    int w = (i) % (W), h = ((i) / (W)) % (H), c = ((i) / ((W) * (H))) % (C), n = (i) / ((W) * (H) * (C))
#define AT(st, n, c, h, w) ((n) * (st).s0 + (c) * (st).s1 + (h) * (st).s2 + (w) * (st).s3)

// geo = (H, W, OH, OW, kh, kw, sh, sw), pad = (ph, pw): input H x W, output OH x OW, window, strides, padding.
#if WANT_max_pool
__kernel void K(max_pool)(GLOBAL(T, y), GLOBAL(const T, x), int total, int C, int8 geo, int2 pad, int4 xs,
                          int4 ys) {
    SHIFT(y); SHIFT(x);
    int i = get_global_id(0);
    if (i >= total) return;
    NCHW_SPLIT(i, C, geo.s2, geo.s3, n, c, oh, ow);
    T best = -INFINITY;
    for (int dy = 0; dy < geo.s4; dy++) {
        int ih = oh * geo.s6 - pad.s0 + dy;
        if (ih < 0 || ih >= geo.s0) continue;
        for (int dx = 0; dx < geo.s5; dx++) {
            int iw = ow * geo.s7 - pad.s1 + dx;
            if (iw < 0 || iw >= geo.s1) continue;
            T v = x[AT(xs, n, c, ih, iw)];
            if (v > best || isnan(v)) best = v;
        }
    }
    y[AT(ys, n, c, oh, ow)] = best;
}
#endif

// The input position (ih, iw) of window (oh, ow)'s first tap equal to the window's max y; -1 if none.
inline int2 first_max(__global const T* x, T y, int n, int c, int oh, int ow, int8 geo, int2 pad, int4 xs) {
    for (int dy = 0; dy < geo.s4; dy++) {
        int ih = oh * geo.s6 - pad.s0 + dy;
        if (ih < 0 || ih >= geo.s0) continue;
        for (int dx = 0; dx < geo.s5; dx++) {
            int iw = ow * geo.s7 - pad.s1 + dx;
            if (iw < 0 || iw >= geo.s1) continue;
            if (x[AT(xs, n, c, ih, iw)] == y) return (int2)(ih, iw);
        }
    }
    return (int2)(-1, -1);
}

// Output windows containing input row ih: [lo, hi] (empty when lo > hi).
#define WINDOWS(ih, size_out, k, s, p, lo, hi) \
    int lo = max(0, ((ih) + (p) - (k) + (s)) / (s)), hi = min((size_out) - 1, ((ih) + (p)) / (s))

// dx[n, c, ih, iw] = sum of g over the windows whose first maximum is (ih, iw); with RELU
// (_FusedMaxPoolGradReluGrad: x is a ReLU's output) times ReluGrad's mask x > 0, a multiply as relu_grad's.
#ifndef RELU
#define RELU 0
#endif
#if WANT_max_pool_grad
__kernel void K(max_pool_grad)(GLOBAL(T, dx), GLOBAL(const T, x), GLOBAL(const T, y), GLOBAL(const T, g),
                               int total, int C, int8 geo, int2 pad, int4 xs, int4 ys) {
    SHIFT(dx); SHIFT(x); SHIFT(y); SHIFT(g);
    int i = get_global_id(0);
    if (i >= total) return;
    NCHW_SPLIT(i, C, geo.s0, geo.s1, n, c, ih, iw);
    WINDOWS(ih, geo.s2, geo.s4, geo.s6, pad.s0, oh0, oh1);
    WINDOWS(iw, geo.s3, geo.s5, geo.s7, pad.s1, ow0, ow1);
    T acc = 0;
    for (int oh = oh0; oh <= oh1; oh++)
        for (int ow = ow0; ow <= ow1; ow++) {
            int yo = AT(ys, n, c, oh, ow);
            int2 at = first_max(x, y[yo], n, c, oh, ow, geo, pad, xs);
            if (at.x == ih && at.y == iw) acc += g[yo];
        }
    dx[AT(xs, n, c, ih, iw)] = RELU ? acc * (T)(x[AT(xs, n, c, ih, iw)] > (T)0) : acc;
}
#endif

// The same for 2x2 windows with stride 2 tiling the input exactly: one work-item per window writes its four
// input positions (the first maximum gets g, the others 0), no search over neighbouring windows. RELU as above: the
// maximum is the x there, so the mask is ym > 0.
#if WANT_max_pool_grad_2x2
__kernel void K(max_pool_grad_2x2)(GLOBAL(T, dx), GLOBAL(const T, x), GLOBAL(const T, y), GLOBAL(const T, g),
                                   int total, int C, int8 geo, int2 pad, int4 xs, int4 ys) {
    SHIFT(dx); SHIFT(x); SHIFT(y); SHIFT(g);
    int i = get_global_id(0);
    if (i >= total) return;
    NCHW_SPLIT(i, C, geo.s2, geo.s3, n, c, oh, ow);
    int yo = AT(ys, n, c, oh, ow);
    T ym = y[yo], gv = g[yo];
    bool done = false;
    for (int dy = 0; dy < 2; dy++)
        for (int dx_ = 0; dx_ < 2; dx_++) {
            int at = AT(xs, n, c, 2 * oh + dy, 2 * ow + dx_);
            bool hit = !done && x[at] == ym;
            done = done || hit;
            dx[at] = hit ? (RELU ? gv * (T)(ym > (T)0) : gv) : (T)0;
        }
}
#endif

// out[window] = g at the window's first maximum (the gradient of MaxPoolGrad with respect to its grad input).
#if WANT_max_pool_grad_grad
__kernel void K(max_pool_grad_grad)(GLOBAL(T, out), GLOBAL(const T, x), GLOBAL(const T, y),
                                    GLOBAL(const T, g), int total, int C, int8 geo, int2 pad, int4 xs, int4 ys) {
    SHIFT(out); SHIFT(x); SHIFT(y); SHIFT(g);
    int i = get_global_id(0);
    if (i >= total) return;
    NCHW_SPLIT(i, C, geo.s2, geo.s3, n, c, oh, ow);
    int yo = AT(ys, n, c, oh, ow);
    int2 at = first_max(x, y[yo], n, c, oh, ow, geo, pad, xs);
    out[yo] = at.x < 0 ? (T)0 : g[AT(xs, n, c, at.x, at.y)];
}
#endif

// Taps of window (oh, ow) inside the input.
inline int window_count(int oh, int ow, int8 geo, int2 pad) {
    int h0 = oh * geo.s6 - pad.s0, w0 = ow * geo.s7 - pad.s1;
    int rows = min(h0 + geo.s4, geo.s0) - max(h0, 0), cols = min(w0 + geo.s5, geo.s1) - max(w0, 0);
    return rows * cols;
}

#if WANT_avg_pool
__kernel void K(avg_pool)(GLOBAL(T, y), GLOBAL(const T, x), int total, int C, int8 geo, int2 pad, int4 xs,
                          int4 ys) {
    SHIFT(y); SHIFT(x);
    int i = get_global_id(0);
    if (i >= total) return;
    NCHW_SPLIT(i, C, geo.s2, geo.s3, n, c, oh, ow);
    T s = 0;
    for (int dy = 0; dy < geo.s4; dy++) {
        int ih = oh * geo.s6 - pad.s0 + dy;
        if (ih < 0 || ih >= geo.s0) continue;
        for (int dx = 0; dx < geo.s5; dx++) {
            int iw = ow * geo.s7 - pad.s1 + dx;
            if (iw >= 0 && iw < geo.s1) s += x[AT(xs, n, c, ih, iw)];
        }
    }
    y[AT(ys, n, c, oh, ow)] = s / (T)window_count(oh, ow, geo, pad);
}
#endif

#if WANT_avg_pool_grad
__kernel void K(avg_pool_grad)(GLOBAL(T, dx), GLOBAL(const T, g), int total, int C, int8 geo, int2 pad,
                               int4 xs, int4 ys) {
    SHIFT(dx); SHIFT(g);
    int i = get_global_id(0);
    if (i >= total) return;
    NCHW_SPLIT(i, C, geo.s0, geo.s1, n, c, ih, iw);
    WINDOWS(ih, geo.s2, geo.s4, geo.s6, pad.s0, oh0, oh1);
    WINDOWS(iw, geo.s3, geo.s5, geo.s7, pad.s1, ow0, ow1);
    T acc = 0;
    for (int oh = oh0; oh <= oh1; oh++)
        for (int ow = ow0; ow <= ow1; ow++)
            acc += g[AT(ys, n, c, oh, ow)] / (T)window_count(oh, ow, geo, pad);
    dx[AT(xs, n, c, ih, iw)] = acc;
}
#endif

// -- compact saved state (tfplus.planner.compact): bit for bit the NumPy variants in kernels/numpy/nn.py ----
// np.maximum(a, b): a if a > b or a is NaN, else b. So ties give b (max(-0., +0.) is +0.) and of two NaNs the
// first; fmax() and max_pool's running maximum differ on exactly these.
#define NP_MAX(a, b) ((a) > (b) || isnan(a) ? (a) : (b))

// The 2x2 window of x from `at` (x's strides xs): *m = its maximum, reduced in the NumPy kernel's order (row pairs
// first); returns its first tap equal to *m, 0..3 in scan order (0,0) (0,1) (1,0) (1,1); 3 if none (NaN).
// Also argmax_pool.cl's.
inline uchar window_2x2_max(__global const T* x, int at, int4 xs, T* m) {
    T v[4] = {x[at], x[at + xs.s3], x[at + xs.s2], x[at + xs.s2 + xs.s3]};
    *m = NP_MAX(NP_MAX(v[0], v[2]), NP_MAX(v[1], v[3]));
    uchar t = 0;
    while (t < 3 && v[t] != *m) t++;
    return t;
}

// 2x2 / stride 2 windows tiling the input: y = the window's maximum, argmax = its tap (window_2x2_max).
#if WANT_max_pool_2x2_argmax
__kernel void K(max_pool_2x2_argmax)(GLOBAL(T, y), GLOBAL(uchar, argmax), GLOBAL(const T, x), int total,
                                     int C, int8 geo, int2 pad, int4 xs, int4 ys) {
    SHIFT(y); SHIFT(argmax); SHIFT(x);
    int i = get_global_id(0);
    if (i >= total) return;
    NCHW_SPLIT(i, C, geo.s2, geo.s3, n, c, oh, ow);
    T m;
    uchar t = window_2x2_max(x, AT(xs, n, c, 2 * oh, 2 * ow), xs, &m);
    int yo = AT(ys, n, c, oh, ow);
    y[yo] = m;
    argmax[yo] = t;
}
#endif

// ReluGrad(MaxPoolGrad) of a ReLU output from the window argmax: g * (tap is the argmax and y > 0) at each of
// the window's four taps. A multiply, not a select, as NumPy does: a negative g gives -0. elsewhere, NaN g NaN.
#if WANT_max_pool_grad_2x2_argmax
__kernel void K(max_pool_grad_2x2_argmax)(GLOBAL(T, dx), GLOBAL(const T, y), GLOBAL(const T, g),
                                          GLOBAL(const uchar, argmax), int total, int C, int8 geo, int2 pad,
                                          int4 xs, int4 ys) {
    SHIFT(dx); SHIFT(y); SHIFT(g); SHIFT(argmax);
    int i = get_global_id(0);
    if (i >= total) return;
    NCHW_SPLIT(i, C, geo.s2, geo.s3, n, c, oh, ow);
    int yo = AT(ys, n, c, oh, ow), at = AT(xs, n, c, 2 * oh, 2 * ow);
    int a = y[yo] > 0 ? argmax[yo] : -1;
    T gv = g[yo];
    for (int t = 0; t < 4; t++) dx[at + (t >> 1) * xs.s2 + (t & 1) * xs.s3] = gv * (T)(t == a);
}
#endif

// -- softmax and cross-entropies: one work-item per row of `cols` ----------------------------------------------
// log_softmax(x)[j] = x[j] - mx - log(sum exp(x - mx))
inline T row_lse(__global const T* x, int cols, T* mx) {
    T m = -INFINITY;
    for (int j = 0; j < cols; j++) m = fmax(m, x[j]);
    T s = 0;
    for (int j = 0; j < cols; j++) s += exp(x[j] - m);
    *mx = m;
    return log(s);
}

#if WANT_softmax
__kernel void K(softmax)(GLOBAL(T, out), GLOBAL(const T, x), int rows, int cols, int log_out) {
    SHIFT(out); SHIFT(x);
    int r = get_global_id(0);
    if (r >= rows) return;
    x += r * cols;
    out += r * cols;
    T mx, lse = row_lse(x, cols, &mx);
    for (int j = 0; j < cols; j++) out[j] = log_out ? x[j] - mx - lse : exp(x[j] - mx - lse);
}
#endif

// loss[r] = -log_softmax(x)[label]; backprop[r] = softmax(x) - onehot(label). A label outside [0, cols) gives a
// nan loss and nan gradients (as TF's GPU kernel; the cpu kernel raises).
#if WANT_sparse_xent || WANT_sparse_xent_mean
// One row: its backprop times `scale` (1 leaves the bits as they are), and its loss.
inline T sparse_xent_row(__global const T* x, __global T* backprop, long label, int cols, T scale) {
    bool ok = label >= 0 && label < cols;
    T mx, lse = row_lse(x, cols, &mx);
    for (int j = 0; j < cols; j++)
        backprop[j] = (ok ? exp(x[j] - mx - lse) - (j == label ? (T)1 : (T)0) : NAN) * scale;
    return ok ? lse - (x[label] - mx) : NAN;
}
#endif

#if WANT_sparse_xent
__kernel void K(sparse_xent)(GLOBAL(T, loss), GLOBAL(T, backprop), GLOBAL(const T, x), GLOBAL(const TI, labels),
                             int rows, int cols) {
    SHIFT(loss); SHIFT(backprop); SHIFT(x); SHIFT(labels);
    int r = get_global_id(0);
    if (r >= rows) return;
    loss[r] = sparse_xent_row(x + r * cols, backprop + r * cols, labels[r], cols, (T)1);
}
#endif

// _FusedSparseXentMean: sparse_xent's rows, their mean and the backprop scaled by inv (1 / max(rows, 1), the
// Mean gradient's scale, made on the host in T) in one launch of one work-group of XM_WG items (a power of two):
// item t takes rows t, t + XM_WG, ..., the group adds the items' sums in a fixed tree, and the mean is that sum
// over `rows` (as the Mean kernel: no rows give 0 / 0, a nan).
#if WANT_sparse_xent_mean
__kernel __attribute__((reqd_work_group_size(XM_WG, 1, 1)))
void K(sparse_xent_mean)(GLOBAL(T, loss), GLOBAL(T, backprop), GLOBAL(const T, x), GLOBAL(const TI, labels),
                         int rows, int cols, T inv) {
    SHIFT(loss); SHIFT(backprop); SHIFT(x); SHIFT(labels);
    __local T sums[XM_WG];
    const int t = get_local_id(0);
    T s = 0;
    for (int r = t; r < rows; r += XM_WG) s += sparse_xent_row(x + r * cols, backprop + r * cols, labels[r], cols, inv);
    sums[t] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = XM_WG / 2; h > 0; h >>= 1) {
        if (t < h) sums[t] += sums[t + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (t == 0) loss[0] = sums[0] / (T)rows;
}
#endif

// loss[r] = -sum labels * log_softmax(x); backprop[r] = softmax(x) - labels.
#if WANT_xent
__kernel void K(xent)(GLOBAL(T, loss), GLOBAL(T, backprop), GLOBAL(const T, x), GLOBAL(const T, labels),
                      int rows, int cols) {
    SHIFT(loss); SHIFT(backprop); SHIFT(x); SHIFT(labels);
    int r = get_global_id(0);
    if (r >= rows) return;
    x += r * cols;
    labels += r * cols;
    backprop += r * cols;
    T mx, lse = row_lse(x, cols, &mx);
    T l = 0;
    for (int j = 0; j < cols; j++) {
        T ls = x[j] - mx - lse;
        l -= labels[j] * ls;
        backprop[j] = exp(ls) - labels[j];
    }
    loss[r] = l;
}
#endif

// -- LeakyRelu, LRN, FusedBatchNorm ---------------------------------------------------------------------------
#if WANT_leaky_relu
__kernel void K(leaky_relu)(GLOBAL(T, out), GLOBAL(const T, x), T alpha, int n) {
    SHIFT(out); SHIFT(x);
    int i = get_global_id(0);
    if (i < n) { T v = x[i]; out[i] = v > 0 ? v : v * alpha; }
}
#endif

#if WANT_leaky_relu_grad
__kernel void K(leaky_relu_grad)(GLOBAL(T, out), GLOBAL(const T, g), GLOBAL(const T, x), T alpha, int n) {
    SHIFT(out); SHIFT(g); SHIFT(x);
    int i = get_global_id(0);
    if (i < n) out[i] = x[i] > 0 ? g[i] : g[i] * alpha;
}
#endif

// LRN over the last axis (C channels) of NHWC: N_d = bias + alpha * sum of x^2 over channels d-r..d+r.
inline T lrn_norm(__global const T* x, int row, int d, int C, int r, T bias, T alpha) {
    T s = 0;
    for (int j = max(0, d - r); j <= min(C - 1, d + r); j++) s += x[row + j] * x[row + j];
    return bias + alpha * s;
}

#if WANT_lrn
__kernel void K(lrn)(GLOBAL(T, y), GLOBAL(const T, x), int n, int C, int r, T bias, T alpha, T beta) {
    SHIFT(y); SHIFT(x);
    int i = get_global_id(0);
    if (i >= n) return;
    int d = i % C;
    y[i] = x[i] * pow(lrn_norm(x, i - d, d, C, r, bias, alpha), -beta);
}
#endif

// dx_i = g_i N_i^-beta - 2 alpha beta x_i sum_{|j - i| <= r} g_j y_j / N_j
#if WANT_lrn_grad
__kernel void K(lrn_grad)(GLOBAL(T, dx), GLOBAL(const T, g), GLOBAL(const T, x), GLOBAL(const T, y), int n,
                          int C, int r, T bias, T alpha, T beta) {
    SHIFT(dx); SHIFT(g); SHIFT(x); SHIFT(y);
    int i = get_global_id(0);
    if (i >= n) return;
    int d = i % C, row = i - d;
    T acc = 0;
    for (int j = max(0, d - r); j <= min(C - 1, d + r); j++)
        acc += g[row + j] * y[row + j] / lrn_norm(x, row, j, C, r, bias, alpha);
    dx[i] = g[i] * pow(lrn_norm(x, row, d, C, r, bias, alpha), -beta) - 2 * alpha * beta * x[i] * acc;
}
#endif

// Training statistics, from the per-channel sums of x - K and (x - K)^2, K = x[c * S] the channel's first element
// (fused.cl's channel sums MODE 7, in saved_mean and saved_var): saved mean and biased variance, and the moving
// averages (1 - f) * old + f * batch (the variance Bessel-corrected); old is not read when f == 1. One work-item
// per channel; with `zero`, item 0 also zeroes reserve[0] (V3's reserve_space_3: a launch of its own otherwise).
#if WANT_bn_stats_finish
__kernel void K(bn_stats_finish)(GLOBAL(T, batch_mean), GLOBAL(T, batch_var), GLOBAL(T, saved_mean),
                                 GLOBAL(T, saved_var), GLOBAL(const T, old_mean), GLOBAL(const T, old_var),
                                 GLOBAL(T, reserve), GLOBAL(const T, x), int C, int S, T count, T f, T bessel,
                                 int zero) {
    SHIFT(batch_mean); SHIFT(batch_var); SHIFT(saved_mean); SHIFT(saved_var); SHIFT(old_mean); SHIFT(old_var);
    SHIFT(reserve); SHIFT(x);
    int c = get_global_id(0);
    if (zero && c == 0) reserve[0] = 0;
    if (c >= C) return;
    T d = saved_mean[c] / count;  // the mean's distance from K
    T m = (count > 0 ? x[c * S] : (T)0) + d, v = fmax(saved_var[c] / count - d * d, (T)0);
    saved_mean[c] = m;
    saved_var[c] = v;
    batch_mean[c] = f == 1 ? m : (1 - f) * old_mean[c] + f * m;
    batch_var[c] = f == 1 ? v * bessel : (1 - f) * old_var[c] + f * bessel * v;
}
#endif

// The activation a batch norm fused with the one after it applies as it writes y (-DBN_ACT=1: Relu, 2: Relu6;
// 0: none), written as elementwise.cl's relu / relu6 are, and the mask its gradient applies to dy, read from the
// activation's output z (z in (0, 6) exactly where the normalized value is).
#if BN_ACT == 1
#define BN_ACTIVATE(v) ((v) < 0 ? (T)0 : (v))
#define BN_MASKED(g, z) ((z) > 0 ? (g) : (T)0)
#elif BN_ACT == 2
#define BN_ACTIVATE(v) ((v) < 0 ? (T)0 : ((v) > 6 ? (T)6 : (v)))
#define BN_MASKED(g, z) ((((z) > 0) & ((z) < 6)) ? (g) : (T)0)  // & not &&: no branch
#else
#define BN_ACTIVATE(v) (v)
#define BN_MASKED(g, z) (g)
#endif

// y = act((x - mean[c]) * scale[c] / sqrt(var[c] + eps) + offset[c])
#if WANT_bn_apply
__kernel void K(bn_apply)(GLOBAL(T, y), GLOBAL(const T, x), GLOBAL(const T, scale), GLOBAL(const T, offset),
                          GLOBAL(const T, mean), GLOBAL(const T, var), int n, int C, int S, T eps) {
    SHIFT(y); SHIFT(x); SHIFT(scale); SHIFT(offset); SHIFT(mean); SHIFT(var);
    int i = get_global_id(0);
    if (i >= n) return;
    int c = (i / S) % C;
    T v = (x[i] - mean[c]) * (scale[c] * rsqrt(var[c] + eps)) + offset[c];
    y[i] = BN_ACTIVATE(v);
}
#endif

// Training: dx = scale * inv * (dy - doffset / count - (x - mean) * inv * dscale / count), inv = 1/sqrt(var+eps);
// inference: dx = dy * scale * inv. With BN_ACT, dy is the activation's gradient masked at its output z.
#if WANT_bn_grad_apply
__kernel void K(bn_grad_apply)(GLOBAL(T, dx), GLOBAL(const T, dy), GLOBAL(const T, x), GLOBAL(const T, scale),
                               GLOBAL(const T, mean), GLOBAL(const T, var), GLOBAL(const T, dscale),
                               GLOBAL(const T, doffset), GLOBAL(const T, z), int n, int C, int S, int count, T eps,
                               int training) {
    SHIFT(dx); SHIFT(dy); SHIFT(x); SHIFT(scale); SHIFT(mean); SHIFT(var); SHIFT(dscale); SHIFT(doffset);
    SHIFT(z);
    int i = get_global_id(0);
    if (i >= n) return;
    int c = (i / S) % C;
    T inv = rsqrt(var[c] + eps);
    T g = dy[i], zi = z[i];  // both loaded: a load inside the select would be a branch
    g = BN_MASKED(g, zi);
    if (training) g -= doffset[c] / count + (x[i] - mean[c]) * inv * dscale[c] / count;
    dx[i] = g * scale[c] * inv;
}
#endif

// -- batch norm in statistics passes (ops/bn_split_ops.py; launchers: bn_split.py) ------------------------------
// One work-item per channel c: vectors are (C,). A micro-batch's moments from the sums of x - K and (x - K)^2, K =
// x[c * S] the channel's first element (fused.cl's channel sums MODE 7; s1 is `within` itself, s2 scratch): its
// mean (float64, with its square, for Chan's merge over the micro-batches) and its variance about that mean.
#if WANT_bn_moments_finish
__kernel void K(bn_moments_finish)(GLOBAL(double, mean), GLOBAL(double, square), GLOBAL(T, within),
                                   GLOBAL(const T, s2), GLOBAL(const T, x), int C, int S, T count) {
    SHIFT(mean); SHIFT(square); SHIFT(within); SHIFT(s2); SHIFT(x);
    int c = get_global_id(0);
    if (c >= C) return;
    T d = within[c] / count;  // the mean's distance from K
    T m = (count > 0 ? x[c * S] : (T)0) + d;
    mean[c] = m;
    square[c] = (double)m * (double)m;
    within[c] = fmax(s2[c] / count - d * d, (T)0);
}
#endif

// From the moments merged over the micro-batches: the batch's mean; its variance, the mean within-variance plus
// the spread of the micro-batches' means (float64: the difference keeps its digits); 1 / sqrt(variance + eps);
// scale times that.
#if WANT_bn_from_moments
__kernel void K(bn_from_moments)(GLOBAL(T, mean), GLOBAL(T, var), GLOBAL(T, inv), GLOBAL(T, scaled),
                                 GLOBAL(const double, mean_wide), GLOBAL(const double, square_wide),
                                 GLOBAL(const T, within), GLOBAL(const T, scale), int C, T eps) {
    SHIFT(mean); SHIFT(var); SHIFT(inv); SHIFT(scaled); SHIFT(mean_wide); SHIFT(square_wide); SHIFT(within);
    SHIFT(scale);
    int c = get_global_id(0);
    if (c >= C) return;
    double m = mean_wide[c];
    double between = square_wide[c] - m * m;
    T v = within[c] + (T)between;
    T r = rsqrt(v + eps);
    mean[c] = (T)m;
    var[c] = v;
    inv[c] = r;
    scaled[c] = scale[c] * r;
}
#endif

// y = act((x - mean[c]) * (scale[c] * inv[c]) + offset[c])
#if WANT_bn_normalize
__kernel void K(bn_normalize)(GLOBAL(T, y), GLOBAL(const T, x), GLOBAL(const T, mean), GLOBAL(const T, inv),
                              GLOBAL(const T, scale), GLOBAL(const T, offset), int n, int C, int S) {
    SHIFT(y); SHIFT(x); SHIFT(mean); SHIFT(inv); SHIFT(scale); SHIFT(offset);
    int i = get_global_id(0);
    if (i >= n) return;
    int c = (i / S) % C;
    T v = (x[i] - mean[c]) * (scale[c] * inv[c]) + offset[c];
    y[i] = BN_ACTIVATE(v);
}
#endif

// dx = scaled[c] * (dy - d_offset[c] / count - (x - mean[c]) * inv[c] * d_scale[c] / count), count the values per
// channel of these rows; with BN_ACT, dy masked at z. d_scale and d_offset: sums over these rows, or the
// micro-batches' sums averaged (the batch's over the batch's count, the same quotient); copied to scale_out and
// offset_out (the op's gradients of the scale and offset) by the first C items (max(n, C) of them). With MASK_X,
// z is the norm's offset (C,) and the mask's z is remade from x as bn_normalize made it (scaled[c] = scale * inv).
#ifndef MASK_X
#define MASK_X 0
#endif
#if WANT_bn_grad_split
__kernel void K(bn_grad_split)(GLOBAL(T, dx), GLOBAL(T, scale_out), GLOBAL(T, offset_out), GLOBAL(const T, dy),
                               GLOBAL(const T, x), GLOBAL(const T, mean), GLOBAL(const T, inv),
                               GLOBAL(const T, scaled), GLOBAL(const T, d_scale), GLOBAL(const T, d_offset),
                               GLOBAL(const T, z), int n, int C, int S, T count) {
    SHIFT(dx); SHIFT(scale_out); SHIFT(offset_out); SHIFT(dy); SHIFT(x); SHIFT(mean); SHIFT(inv); SHIFT(scaled);
    SHIFT(d_scale); SHIFT(d_offset); SHIFT(z);
    int i = get_global_id(0);
    if (i < C) {
        scale_out[i] = d_scale[i];
        offset_out[i] = d_offset[i];
    }
    if (i >= n) return;
    int c = (i / S) % C;
#if MASK_X
    T g = dy[i], zi = BN_ACTIVATE((x[i] - mean[c]) * scaled[c] + z[c]);
#else
    T g = dy[i], zi = z[i];  // both loaded: a load inside the select would be a branch
#endif
    g = BN_MASKED(g, zi);
    T x_hat = (x[i] - mean[c]) * inv[c];
    dx[i] = ((g - d_offset[c] / count) - x_hat * (d_scale[c] / count)) * scaled[c];
}
#endif
