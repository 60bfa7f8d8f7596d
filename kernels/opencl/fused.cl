// Fused ops of the graph rewrite (tfplus.engine.rewrite; ops/fused_ops.py). Pointer arguments follow common.cl's
// (buffer, offset) convention: GLOBAL(type, p) in the signature, SHIFT(p) first in the body. ACT(v) is the activation the program was built for (-DRELU6=0|1).
// An element i of a (outer, C, inner) view is in channel (i / inner) % C: NCHW has inner = H*W, NHWC inner = 1.

#if RELU6
#define ACT(v) clamp((v), (T)0, (T)6)
#define MASK(f) ((f) > (T)0 && (f) < (T)6)
#define MASK_NOBRANCH(f) (((f) > (T)0) & ((f) < (T)6))
#else
#define ACT(v) fmax((v), (T)0)
#define MASK(f) ((f) > (T)0)
#define MASK_NOBRANCH(f) ((f) > (T)0)
#endif
// g where the mask at z holds, else 0: both loaded, no branch (a short-circuit && made PoCL's loops scalar).
inline T masked_at(T g, T z) { return MASK_NOBRANCH(z) ? g : (T)0; }

#if WANT_fused_bias_relu
__kernel void K(fused_bias_relu)(GLOBAL(T, out), GLOBAL(const T, x), GLOBAL(const T, bias), int n, int C,
                                 int inner) {
    SHIFT(out); SHIFT(x); SHIFT(bias);
    int i = get_global_id(0);
    if (i < n) out[i] = ACT(x[i] + bias[(i / inner) % C]);
}
#endif

// The per-channel sums of the bias gradient, with the activation's gradient dx on the way (MODE 0: dx = g masked
// by the features f; 1: g arrives masked already (planner.compact), dx = g, f is not read; 2: BiasAddGrad, only
// the sums: dx and f are not touched; 3: FusedBatchNormGrad's two sums, d offset = sum(g) into part and
// d scale = sum(g * (f - mean[c])) / sqrt(var[c] + t) into part2, f being x, t eps; dx is not touched; 4:
// batch norm's statistics, the sum of (g - mean[c] / t)^2, g being x, mean[c] its sum and t its count; 5: the
// ReLU gradient of a ReLU -> 2x2 max-pool pair kept compact (planner.compact), straight from the pool: g is the
// pool output's gradient, f the pool output and am its argmax, so each element of dx is g at its window when it is
// the window's first maximum and the window's maximum is > 0, else 0 (nn.cl's max_pool_grad_2x2_argmax, here in
// the same pass as the sums; pw is dx's width); 6: as 3, with g masked first by the activation's gradient at its
// output z, which dx's argument holds (not written): a batch norm fused with the ReLU after it; 7: batch norm's
// statistics in one pass, the sums of g - K[c] into part and of (g - K[c])^2 into part2, K[c] the channel's first
// element: a shift near the mean, so that the variance's difference of the two loses little). Many
// work-groups per channel, each reading a contiguous chunk coalesced: group k writes its partial sums to
// part[k * C + c] (part is db itself when there is one chunk), and the launcher sums the partials over k in a
// second pass, or the last group does (CHANNEL_FINISH); every sum runs in a fixed order, so the sums are
// deterministic.
#if MODE == 0
#define GRAD(i) (MASK(f[i]) ? g[i] : (T)0)
#elif MODE == 4
#define GRAD(i) ((g[i] - center) * (g[i] - center))
#elif MODE == 5
#define GRAD(i) POOLED(i)
#elif MODE == 6
#define GRAD(i) masked_at(g[i], dx[i])
#elif MODE == 7
#define GRAD(i) (g[i] - center)
#else
#define GRAD(i) g[i]
#endif
#if MODE == 2 || MODE == 3 || MODE == 4 || MODE == 6 || MODE == 7
#define STORE(i, v)
#else
#define STORE(i, v) dx[i] = (v)
#endif
#if MODE == 3 || MODE == 6
#define SECOND(i, c, v) acc2 += (v) * (f[i] - mean[c])
#elif MODE == 7
#define SECOND(i, c, v) acc2 += (v) * (v)
#else
#define SECOND(i, c, v)
#endif
#define CHANNEL_ARGS GLOBAL(T, dx), GLOBAL(T, part), GLOBAL(T, part2), GLOBAL(const T, g), GLOBAL(const T, f), \
                     GLOBAL(const T, mean), GLOBAL(const T, var), GLOBAL(T, db), GLOBAL(T, db2), GLOBAL(int, done), \
                     GLOBAL(const uchar, am)
#define CHANNEL_SHIFT SHIFT(dx); SHIFT(part); SHIFT(part2); SHIFT(g); SHIFT(f); SHIFT(mean); SHIFT(var); SHIFT(db); \
                      SHIFT(db2); SHIFT(done); SHIFT(am); __local int last_;
// MODE 5: the pool gradient at pooled element p for the window's tap tp (0..3, scan order); a multiply, not a
// select, as max_pool_grad_2x2_argmax (a negative g gives -0. off the maximum, a NaN g NaN).
inline T pooled_grad(__global const T* g, __global const T* y, __global const uchar* am, int p, int tp) {
    return g[p] * (T)(tp == (y[p] > 0 ? (int)am[p] : -1));
}

// With `finish`, the last of the chunks' groups of a block of columns (counted in done[block], a zeroed table, set
// back to 0 after) adds the partial sums up into db (and db2), in chunk order as the second pass it replaces
// (reduce.cl's sum_rows), so the sums do not depend on which group came last: as gemm.cl's GEMM_SPLIT_FINISH,
// with the same device-wide fences.
// The group reads `lanes` chunks of its cw columns at a time past the caches (volatile) into sh, and lane 0 of
// each column adds them up.
#define CHANNEL_FINISH(block, col0, cw) \
    if (finish) { \
        barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE); \
        if (lid == 0) { \
            DEVICE_FENCE(); \
            last_ = atomic_inc(done + (block)) == get_num_groups(0) - 1; \
            DEVICE_FENCE(); \
        } \
        barrier(CLK_LOCAL_MEM_FENCE); \
        if (last_) { \
            finish_columns(part, db, sh, C, col0, cw, get_num_groups(0)); \
            if (MODE == 3 || MODE == 6 || MODE == 7) finish_columns(part2, db2, sh, C, col0, cw, get_num_groups(0)); \
            if (lid == 0) done[block] = 0; \
        } \
    }
inline void finish_columns(volatile __global const T* part, __global T* db, __local T* sh, int C, int col0, int cw,
                           int chunks) {
    int lid = get_local_id(0), lanes = get_local_size(0) / cw, lane = lid / cw, ci = lid - lane * cw;
    int col = col0 + ci;
    T s = 0;
    for (int k0 = 0; k0 < chunks; k0 += lanes) {
        int k = k0 + lane;
        sh[lid] = (k < chunks && col < C) ? part[k * C + col] : (T)0;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lane == 0) {
            for (int l = 0; l < lanes && k0 + l < chunks; l++) s += sh[l * cw + ci];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lane == 0 && col < C) db[col] = s;
}

// inner > 1 (NCHW): group (k, c) takes elements [k * chunk, (k + 1) * chunk) of channel c's outer * inner, a run
// of `inner` contiguous elements per image; item lid takes every WG-th, walking (o, r) without a division.
#if WANT_relu_grad_bias_planes
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void K(relu_grad_bias_planes)(CHANNEL_ARGS, int outer, int C, int inner, int chunk, T t, int finish, int pw) {
    CHANNEL_SHIFT
    // MODE 5: element r = (h, w) of plane (o, c) is tap (h & 1, w & 1) of pooled element (h / 2, w / 2).
#define POOLED(i) pooled_grad(g, f, am, (o * C + c) * (inner >> 2) + ((r / pw) >> 1) * (pw >> 1) + ((r % pw) >> 1), \
                              ((r / pw) & 1) * 2 + ((r % pw) & 1))
    __local T sh[WG];
    int lid = get_local_id(0), k = get_group_id(0), c = get_group_id(1);
    T center = MODE == 4 ? mean[c] / t : MODE == 7 && outer > 0 ? g[c * inner] : (T)0;
    int j = k * chunk + lid, end = min(outer * inner, (k + 1) * chunk);
    int o = j / inner, r = j - o * inner;
    T acc = 0, acc2 = 0;
    for (; j < end; j += WG) {
        int i = (o * C + c) * inner + r;
        T v = GRAD(i);
        STORE(i, v);
        acc += v;
        SECOND(i, c, v);
        for (r += WG; r >= inner; r -= inner) o++;
    }
    sh[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (lid < s) sh[lid] += sh[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) part[k * C + c] = sh[0];
#if MODE == 3 || MODE == 6 || MODE == 7
    barrier(CLK_LOCAL_MEM_FENCE);
    sh[lid] = acc2;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (lid < s) sh[lid] += sh[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#if MODE == 7
    if (lid == 0) part2[k * C + c] = sh[0];
#else
    if (lid == 0) part2[k * C + c] = sh[0] * rsqrt(var[c] + t);
#endif
#endif
    CHANNEL_FINISH(c, c, 1)
#undef POOLED
}
#endif

// inner == 1 (NHWC, and a MatMul's (N, C)): the gradient is rows x C. Group (k, b) takes rows [k * chunk,
// (k + 1) * chunk) of columns [b * cw, (b + 1) * cw); its WG items are WG / cw lanes (a power of two) of cw
// consecutive columns, lane l reading rows l, l + lanes, ... so a lane reads a row's columns contiguously.
#if WANT_relu_grad_bias_rows
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void K(relu_grad_bias_rows)(CHANNEL_ARGS, int rows, int C, int cw, int chunk, T t, int finish, int pw) {
    CHANNEL_SHIFT
    // MODE 5: row r = (q = n * H + h, w) is tap (h & 1, w & 1) of pooled row (q / 2, w / 2) (H is even).
#define POOLED(i) pooled_grad(g, f, am, (((r / pw) >> 1) * (pw >> 1) + ((r % pw) >> 1)) * C + col, \
                              ((r / pw) & 1) * 2 + ((r % pw) & 1))
    __local T sh[WG];
    int lid = get_local_id(0), k = get_group_id(0);
    int lanes = WG / cw, lane = lid / cw, col = get_group_id(1) * cw + (lid - lane * cw);
    T center = MODE == 4 && col < C ? mean[col] / t : MODE == 7 && col < C && rows > 0 ? g[col] : (T)0;
    T acc = 0, acc2 = 0;
    if (col < C) {
        int end = min(rows, (k + 1) * chunk);
        for (int r = k * chunk + lane; r < end; r += lanes) {
            int i = r * C + col;
            T v = GRAD(i);
            STORE(i, v);
            acc += v;
            SECOND(i, col, v);
        }
    }
    sh[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = lanes / 2; s > 0; s >>= 1) {
        if (lane < s) sh[lid] += sh[lid + s * cw];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lane == 0 && col < C) part[k * C + col] = sh[lid];
#if MODE == 3 || MODE == 6 || MODE == 7
    barrier(CLK_LOCAL_MEM_FENCE);
    sh[lid] = acc2;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = lanes / 2; s > 0; s >>= 1) {
        if (lane < s) sh[lid] += sh[lid + s * cw];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#if MODE == 7
    if (lane == 0 && col < C) part2[k * C + col] = sh[lid];
#else
    if (lane == 0 && col < C) part2[k * C + col] = sh[lid] * rsqrt(var[col] + t);
#endif
#endif
    CHANNEL_FINISH(get_group_id(1), get_group_id(1) * cw, cw)
#undef POOLED
}
#endif

// _FusedApply: one update over up to 8 variables per launch. Work-item i belongs to the first variable s with
// i < ends[s] (ends: running sizes; unused slots repeat the last end and pass slot 0's buffers) and updates
// element i - ends[s - 1] of it, with the same arithmetic as training.cl's single-variable kernel. Weight decay:
// a slot whose bit is set in `decayed` takes var * decay[0] + grad as its gradient (the AddN(Mul(var, decay), grad)
// that the rewrite folded in).
#define DECAYED(grad, var, s) (((decayed >> (s)) & 1) ? (var) * decay[0] + (grad) : (grad))
#define SLOT_START(ends, s) ((s) == 0 ? 0 : (s) == 1 ? ends.s0 : (s) == 2 ? ends.s1 : (s) == 3 ? ends.s2 : \
                             (s) == 4 ? ends.s3 : (s) == 5 ? ends.s4 : (s) == 6 ? ends.s5 : ends.s6)
inline int slot_of(int i, int8 ends) {
    return (i < ends.s0) ? 0 : (i < ends.s1) ? 1 : (i < ends.s2) ? 2 : (i < ends.s3) ? 3 : (i < ends.s4) ? 4 :
           (i < ends.s5) ? 5 : (i < ends.s6) ? 6 : 7;
}

// _FusedL2Loss: the sums of squares of up to 8 tensors (slots as above) per launch. Group k sums elements
// [k * chunk, (k + 1) * chunk) of the tensors laid end to end into part[first + k] in a fixed tree; the launcher
// adds the partials up (and halves the total) in a second pass.
#if WANT_multi_sumsq
#define SQ_ARGS(X) GLOBAL(const T, x##X)
#define SQ_PICK(X) case X: x = x##X; break;
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void K(multi_sumsq)(SQ_ARGS(0), SQ_ARGS(1), SQ_ARGS(2), SQ_ARGS(3), SQ_ARGS(4), SQ_ARGS(5), SQ_ARGS(6),
                    SQ_ARGS(7), GLOBAL(T, part), int8 ends, int chunk, int first) {
    SHIFT(x0); SHIFT(x1); SHIFT(x2); SHIFT(x3); SHIFT(x4); SHIFT(x5); SHIFT(x6); SHIFT(x7); SHIFT(part);
    __local T sh[WG];
    int lid = get_local_id(0), k = get_group_id(0);
    int end = min(ends.s7, (k + 1) * chunk);
    T acc = 0;
    for (int i = k * chunk + lid; i < end; i += WG) {
        int s = slot_of(i, ends);
        __global const T* x = x0;
        switch (s) { SQ_PICK(1) SQ_PICK(2) SQ_PICK(3) SQ_PICK(4) SQ_PICK(5) SQ_PICK(6) SQ_PICK(7) }
        T v = x[i - SLOT_START(ends, s)];
        acc += v * v;
    }
    sh[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (lid < s) sh[lid] += sh[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) part[first + k] = sh[0];
}
#endif

// Micro-batching's merge of up to 8 accumulators per launch (slots as above): MODE 0 acc = x, 1 acc += x,
// 2 acc *= factor (x unread), 3 acc = (acc + x) * factor (the last micro-batch of a mean); the same arithmetic
// as a copy, elementwise.cl's add and its scale_const.
#if MODE == 0
#define MERGE(a, x) a = (x)
#elif MODE == 1
#define MERGE(a, x) a += (x)
#elif MODE == 3
#define MERGE(a, x) a = (a + (x)) * factor
#else
#define MERGE(a, x) a *= factor
#endif
#if WANT_multi_accumulate
#define ACC_ARGS(X) GLOBAL(T, acc##X), GLOBAL(const T, x##X)
#define ACC_SHIFT(X) SHIFT(acc##X); SHIFT(x##X);
#define ACC_PICK(X) case X: acc = acc##X; x = x##X; break;
__kernel void K(multi_accumulate)(ACC_ARGS(0), ACC_ARGS(1), ACC_ARGS(2), ACC_ARGS(3), ACC_ARGS(4), ACC_ARGS(5),
                                  ACC_ARGS(6), ACC_ARGS(7), int8 ends, T factor) {
    ACC_SHIFT(0) ACC_SHIFT(1) ACC_SHIFT(2) ACC_SHIFT(3) ACC_SHIFT(4) ACC_SHIFT(5) ACC_SHIFT(6) ACC_SHIFT(7)
    int i = get_global_id(0);
    if (i >= ends.s7) return;
    int s = slot_of(i, ends);
    __global T* acc = acc0;
    __global const T* x = x0;
    switch (s) { ACC_PICK(1) ACC_PICK(2) ACC_PICK(3) ACC_PICK(4) ACC_PICK(5) ACC_PICK(6) ACC_PICK(7) }
    int j = i - SLOT_START(ends, s);
    MERGE(acc[j], x[j]);
}
#endif

// The same merge in one launch for any number of tensors, when they all live in one buffer (a memory plan's
// arena): tab[s] = (acc offset, x offset, end) in elements from `base` for the n tensors, the ends running;
// work-item i takes element i - (the end before) of the first tensor s with i < its end, found by bisection
// (a micro-batched step merges some 20-30 tensors at once).
#if WANT_accumulate_table
__kernel void K(accumulate_table)(GLOBAL(T, base), GLOBAL(const int4, tab), int n, T factor) {
    SHIFT(base); SHIFT(tab);
    int i = get_global_id(0);
    if (i >= tab[n - 1].z) return;
    int s = 0, hi = n - 1;
    while (s < hi) {
        int mid = (s + hi) / 2;
        if (i < tab[mid].z) hi = mid; else s = mid + 1;
    }
    int j = i - (s ? tab[s - 1].z : 0);
    __global T* acc = base + tab[s].x;
    __global const T* x = base + tab[s].y;
    MERGE(acc[j], x[j]);
}
#endif

#if WANT_multi_gradient_descent
#define GD_ARGS(X) GLOBAL(T, var##X), GLOBAL(const T, delta##X)
#define GD_SHIFT(X) SHIFT(var##X); SHIFT(delta##X);
#define GD_PICK(X) case X: var = var##X; delta = delta##X; break;
__kernel void K(multi_gradient_descent)(GD_ARGS(0), GD_ARGS(1), GD_ARGS(2), GD_ARGS(3), GD_ARGS(4), GD_ARGS(5),
                                        GD_ARGS(6), GD_ARGS(7), GLOBAL(const T, alpha), GLOBAL(const T, decay),
                                        int8 ends, int decayed) {
    GD_SHIFT(0) GD_SHIFT(1) GD_SHIFT(2) GD_SHIFT(3) GD_SHIFT(4) GD_SHIFT(5) GD_SHIFT(6) GD_SHIFT(7) SHIFT(alpha);
    SHIFT(decay);
    int i = get_global_id(0);
    if (i >= ends.s7) return;
    int s = slot_of(i, ends);
    __global T* var = var0;
    __global const T* delta = delta0;
    switch (s) { GD_PICK(1) GD_PICK(2) GD_PICK(3) GD_PICK(4) GD_PICK(5) GD_PICK(6) GD_PICK(7) }
    int j = i - SLOT_START(ends, s);
    var[j] -= alpha[0] * DECAYED(delta[j], var[j], s);
}
#endif

#if WANT_multi_momentum
#define MOM_ARGS(X) GLOBAL(T, var##X), GLOBAL(T, accum##X), GLOBAL(const T, grad##X)
#define MOM_SHIFT(X) SHIFT(var##X); SHIFT(accum##X); SHIFT(grad##X);
#define MOM_PICK(X) case X: var = var##X; accum = accum##X; grad = grad##X; break;
__kernel void K(multi_momentum)(MOM_ARGS(0), MOM_ARGS(1), MOM_ARGS(2), MOM_ARGS(3), MOM_ARGS(4), MOM_ARGS(5),
                                MOM_ARGS(6), MOM_ARGS(7), GLOBAL(const T, lr), GLOBAL(const T, momentum),
                                GLOBAL(const T, decay), int8 ends, int decayed, int nesterov) {
    MOM_SHIFT(0) MOM_SHIFT(1) MOM_SHIFT(2) MOM_SHIFT(3) MOM_SHIFT(4) MOM_SHIFT(5) MOM_SHIFT(6) MOM_SHIFT(7)
    SHIFT(lr); SHIFT(momentum); SHIFT(decay);
    int i = get_global_id(0);
    if (i >= ends.s7) return;
    int s = slot_of(i, ends);
    __global T* var = var0;
    __global T* accum = accum0;
    __global const T* grad = grad0;
    switch (s) { MOM_PICK(1) MOM_PICK(2) MOM_PICK(3) MOM_PICK(4) MOM_PICK(5) MOM_PICK(6) MOM_PICK(7) }
    int j = i - SLOT_START(ends, s);
    T m = momentum[0], g = DECAYED(grad[j], var[j], s);
    T a = accum[j] * m + g;
    accum[j] = a;
    var[j] -= nesterov ? lr[0] * (g + m * a) : lr[0] * a;
}
#endif

// Adam, as training.cl's apply_adam per element (scalars: beta1_power, beta2_power, lr, beta1, beta2, epsilon).
#if WANT_multi_adam
#define ADAM_ARGS(X) GLOBAL(T, var##X), GLOBAL(T, m##X), GLOBAL(T, v##X), GLOBAL(const T, grad##X)
#define ADAM_SHIFT(X) SHIFT(var##X); SHIFT(m##X); SHIFT(v##X); SHIFT(grad##X);
#define ADAM_PICK(X) case X: var = var##X; m = m##X; v = v##X; grad = grad##X; break;
__kernel void K(multi_adam)(ADAM_ARGS(0), ADAM_ARGS(1), ADAM_ARGS(2), ADAM_ARGS(3), ADAM_ARGS(4), ADAM_ARGS(5),
                            ADAM_ARGS(6), ADAM_ARGS(7), GLOBAL(const T, beta1_power), GLOBAL(const T, beta2_power),
                            GLOBAL(const T, lr), GLOBAL(const T, beta1), GLOBAL(const T, beta2),
                            GLOBAL(const T, epsilon), GLOBAL(const T, decay), int8 ends, int decayed,
                            int nesterov) {
    ADAM_SHIFT(0) ADAM_SHIFT(1) ADAM_SHIFT(2) ADAM_SHIFT(3) ADAM_SHIFT(4) ADAM_SHIFT(5) ADAM_SHIFT(6)
    ADAM_SHIFT(7) SHIFT(beta1_power); SHIFT(beta2_power); SHIFT(lr); SHIFT(beta1); SHIFT(beta2); SHIFT(epsilon);
    SHIFT(decay);
    int i = get_global_id(0);
    if (i >= ends.s7) return;
    int s = slot_of(i, ends);
    __global T* var = var0;
    __global T* m = m0;
    __global T* v = v0;
    __global const T* grad = grad0;
    switch (s) { ADAM_PICK(1) ADAM_PICK(2) ADAM_PICK(3) ADAM_PICK(4) ADAM_PICK(5) ADAM_PICK(6) ADAM_PICK(7) }
    int j = i - SLOT_START(ends, s);
    T one = 1, b1 = beta1[0], g = DECAYED(grad[j], var[j], s);
    T alpha = lr[0] * sqrt(one - beta2_power[0]) / (one - beta1_power[0]);
    T mi = m[j] + (g - m[j]) * (one - b1);
    T vi = v[j] + (g * g - v[j]) * (one - beta2[0]);
    m[j] = mi;
    v[j] = vi;
    T num = nesterov ? mi + (one - b1) * (g - mi) : mi;
    var[j] -= alpha * (num / (sqrt(vi) + epsilon[0]));
}
#endif

// Moving averages, eight variables a launch: var -= (var - value) * factor[0], rounded as the unfused Sub, Mul
// and AssignSub kernels round (no contraction into a fused multiply-add).
#if WANT_multi_moving_average
#define MA_ARGS(X) GLOBAL(T, var##X), GLOBAL(const T, value##X), GLOBAL(const T, factor##X)
#define MA_SHIFT(X) SHIFT(var##X); SHIFT(value##X); SHIFT(factor##X);
#define MA_PICK(X) case X: var = var##X; value = value##X; factor = factor##X; break;
__kernel void K(multi_moving_average)(MA_ARGS(0), MA_ARGS(1), MA_ARGS(2), MA_ARGS(3), MA_ARGS(4), MA_ARGS(5),
                                      MA_ARGS(6), MA_ARGS(7), int8 ends) {
#pragma OPENCL FP_CONTRACT OFF
    MA_SHIFT(0) MA_SHIFT(1) MA_SHIFT(2) MA_SHIFT(3) MA_SHIFT(4) MA_SHIFT(5) MA_SHIFT(6) MA_SHIFT(7)
    int i = get_global_id(0);
    if (i >= ends.s7) return;
    int s = slot_of(i, ends);
    __global T* var = var0;
    __global const T* value = value0;
    __global const T* factor = factor0;
    switch (s) { MA_PICK(1) MA_PICK(2) MA_PICK(3) MA_PICK(4) MA_PICK(5) MA_PICK(6) MA_PICK(7) }
    int j = i - SLOT_START(ends, s);
    T v = var[j];
    T delta = (v - value[j]) * factor[0];
    var[j] = v - delta;
}
#endif
