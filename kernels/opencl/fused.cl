// Fused ops of the graph rewrite (tfplus.optimize; ops/fused_ops.py). Pointer arguments are plain __global
// pointers, one per buffer. ACT(v) is the activation the program was built for (-DRELU6=0|1).
// An element i of a (outer, C, inner) view is in channel (i / inner) % C: NCHW has inner = H*W, NHWC inner = 1.

#if RELU6
#define ACT(v) clamp((v), (T)0, (T)6)
#define MASK(f) ((f) > (T)0 && (f) < (T)6)
#else
#define ACT(v) fmax((v), (T)0)
#define MASK(f) ((f) > (T)0)
#endif

#if WANT_fused_bias_relu
__kernel void K(fused_bias_relu)(__global T* out, __global const T* x, __global const T* bias, int n, int C,
                                 int inner) {
    int i = get_global_id(0);
    if (i < n) out[i] = ACT(x[i] + bias[(i / inner) % C]);
}
#endif

// One work-group of WG items per channel c: each item masks the gradient over its share of the channel's
// outer * inner elements (writing dx) and sums them; the group then sums the items' partial sums in a fixed
// tree, so db is deterministic. MASKED=1: the gradient arrives masked already (planner.compact) and the
// features are not read.
#if WANT_fused_relu_grad_bias
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void K(fused_relu_grad_bias)(__global T* dx, __global T* db, __global const T* g, __global const T* f,
                             int outer, int C, int inner) {
    __local T sh[WG];
    int lid = get_local_id(0), c = get_group_id(0);
    int count = outer * inner;
    T acc = 0;
    for (int j = lid; j < count; j += WG) {
        int o = j / inner;
        int i = (o * C + c) * inner + (j - o * inner);
#if MASKED
        T v = g[i];
#else
        T v = MASK(f[i]) ? g[i] : (T)0;
#endif
        dx[i] = v;
        acc += v;
    }
    sh[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (lid < s) sh[lid] += sh[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) db[c] = sh[0];
}
#endif
