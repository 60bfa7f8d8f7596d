// Array ops: strided copies (transpose, slices, concat, pack, tile, pad, broadcast all reduce to one), one-hot,
// cumulative sums, in-top-k. Copies are built per element size (T = uchar, ushort, uint, ulong): bits move as is.

// out[out0 + offset(i, so)] = in[in0 + offset(i, si)] for i over `shape` (n elements); strides may be
// negative (reversed slices) or zero (broadcast reads).
#if WANT_copy_strided
__kernel void K(copy_strided)(GLOBAL(T, out), GLOBAL(const T, in), int n, int rank, int8 shape, int8 so,
                              int8 si, int out0, int in0) {
    SHIFT(out); SHIFT(in);
    int i = get_global_id(0);
    if (i < n) out[out0 + strided_offset(i, rank, shape, so)] = in[in0 + strided_offset(i, rank, shape, si)];
}
#endif

// Up to 8 arrays one after another in `packed` from element `at` (an all-reduce's bucket of gradients:
// kernels/opencl/collective.py): element i < ends.s7 of the span belongs to array k where ends.s(k-1) <= i <
// ends.sk (the ends after the last array repeat its end). gather8 packs them, scatter8 unpacks them.
#if WANT_gather8 || WANT_scatter8
#define SPANS(X) \
    if (i < ends.s0) X(a0, i) else if (i < ends.s1) X(a1, i - ends.s0) else if (i < ends.s2) X(a2, i - ends.s1) \
    else if (i < ends.s3) X(a3, i - ends.s2) else if (i < ends.s4) X(a4, i - ends.s3) \
    else if (i < ends.s5) X(a5, i - ends.s4) else if (i < ends.s6) X(a6, i - ends.s5) else X(a7, i - ends.s6)
#endif
#if WANT_gather8
#define READ(a, j) { packed[at + i] = a[j]; }
__kernel void K(gather8)(GLOBAL(T, packed), int at, GLOBAL(const T, a0), GLOBAL(const T, a1), GLOBAL(const T, a2),
                         GLOBAL(const T, a3), GLOBAL(const T, a4), GLOBAL(const T, a5), GLOBAL(const T, a6),
                         GLOBAL(const T, a7), int8 ends) {
    SHIFT(packed); SHIFT(a0); SHIFT(a1); SHIFT(a2); SHIFT(a3); SHIFT(a4); SHIFT(a5); SHIFT(a6); SHIFT(a7);
    int i = get_global_id(0);
    if (i < ends.s7) SPANS(READ)
}
#endif
#if WANT_scatter8
#define WRITE(a, j) { a[j] = packed[at + i]; }
__kernel void K(scatter8)(GLOBAL(const T, packed), int at, GLOBAL(T, a0), GLOBAL(T, a1), GLOBAL(T, a2), GLOBAL(T, a3),
                          GLOBAL(T, a4), GLOBAL(T, a5), GLOBAL(T, a6), GLOBAL(T, a7), int8 ends) {
    SHIFT(packed); SHIFT(a0); SHIFT(a1); SHIFT(a2); SHIFT(a3); SHIFT(a4); SHIFT(a5); SHIFT(a6); SHIFT(a7);
    int i = get_global_id(0);
    if (i < ends.s7) SPANS(WRITE)
}
#endif

#if WANT_sum_slots
// out[i] = (slots[i] + slots[n + i] + ...) * scale over the `ranks` slots of n, in rank order: every rank of an
// all-reduce through host shared memory (kernels/opencl/collective.py) computes the same sums, bit for bit.
__kernel void K(sum_slots)(GLOBAL(T, out), GLOBAL(const T, slots), int n, int ranks, T scale) {
    SHIFT(out); SHIFT(slots);
    int i = get_global_id(0);
    if (i < n) {
        T s = slots[i];
        for (int r = 1; r < ranks; r++) s += slots[(long)r * n + i];
        out[i] = s * scale;
    }
}
#endif

#ifdef TI
// OneHot with the depth axis in the middle of (outer, depth, inner): out[o, j, r] = indices[o, r] == j ? on : off.
#if WANT_one_hot
__kernel void K(one_hot)(GLOBAL(T, out), GLOBAL(const TI, indices), GLOBAL(const T, on), GLOBAL(const T, off),
                         int n, int depth, int inner) {
    SHIFT(out); SHIFT(indices); SHIFT(on); SHIFT(off);
    int i = get_global_id(0);
    if (i < n) {
        int r = i % inner, t = i / inner, j = t % depth, o = t / depth;
        out[i] = indices[o * inner + r] == (TI)j ? on[0] : off[0];
    }
}
#endif

#if IS_FLOAT
// InTopK: targets[row] is in the top k of predictions[row] when fewer than k entries are strictly larger
// (ties count in its favour); an out-of-range target or a non-finite prediction gives false, as in TF.
#if WANT_in_top_k
__kernel void K(in_top_k)(GLOBAL(bool_t, out), GLOBAL(const T, pred), GLOBAL(const TI, targets),
                          GLOBAL(const TI, k), int rows, int classes) {
    SHIFT(out); SHIFT(pred); SHIFT(targets); SHIFT(k);
    int row = get_global_id(0);
    if (row >= rows) return;
    TI t = targets[row];
    if (t < 0 || t >= classes || !isfinite(pred[row * classes + t])) { out[row] = 0; return; }
    T v = pred[row * classes + t];
    int larger = 0;
    for (int c = 0; c < classes; c++) {
        T p = pred[row * classes + c];
        if (!isfinite(p)) { out[row] = 0; return; }
        larger += p > v;
    }
    out[row] = larger < k[0];
}
#endif
#endif
#endif

// Cumsum along the middle axis of (outer, len, inner): one work-item per (outer, inner) line.
#if WANT_cumsum
__kernel void K(cumsum)(GLOBAL(T, out), GLOBAL(const T, in), int outer, int len, int inner, int exclusive,
                        int reverse) {
    SHIFT(out); SHIFT(in);
    int i = get_global_id(0);
    if (i >= outer * inner) return;
    int base = (i / inner) * len * inner + i % inner;
    T s = 0;
    for (int j = 0; j < len; j++) {
        int p = base + (reverse ? len - 1 - j : j) * inner;
        T x = in[p];
        if (exclusive) { out[p] = s; s += x; } else { s += x; out[p] = s; }
    }
}
#endif

#ifdef TI
// Gather along the middle axis of params (outer, n, inner): out[o, j, r] = params[o, indices[j], r]; an index
// outside [0, n) gives 0, as TF's GPU kernel. Copies elements by size (T = char, short, int, long).
#if WANT_gather
__kernel void K(gather)(GLOBAL(T, out), GLOBAL(const T, params), GLOBAL(const TI, indices), int total,
                        int n_idx, int n, int inner) {
    SHIFT(out); SHIFT(params); SHIFT(indices);
    int i = get_global_id(0);
    if (i >= total) return;
    int r = i % inner, t = i / inner, j = t % n_idx, o = t / n_idx;
    TI at = indices[j];
    out[i] = (at >= 0 && at < n) ? params[((long)o * n + at) * inner + r] : (T)0;
}
#endif

// DynamicStitch, one (indices, data) pair per launch: out[indices[j], r] = data[j, r].
#if WANT_scatter_rows
__kernel void K(scatter_rows)(GLOBAL(T, out), GLOBAL(const T, data), GLOBAL(const TI, indices), int total,
                              int inner, int rows) {
    SHIFT(out); SHIFT(data); SHIFT(indices);
    int i = get_global_id(0);
    if (i >= total) return;
    TI at = indices[i / inner];
    if (at >= 0 && at < rows) out[(long)at * inner + i % inner] = data[i];
}
#endif

// UnsortedSegmentSum: one work-item per output element (s, r) sums data[j, r] over j with ids[j] == s, in j's
// order (deterministic, no atomics; the id vector is read once per output element).
#if WANT_segment_sum
__kernel void K(segment_sum)(GLOBAL(T, out), GLOBAL(const T, data), GLOBAL(const TI, ids), int total,
                             int n_ids, int inner) {
    SHIFT(out); SHIFT(data); SHIFT(ids);
    int i = get_global_id(0);
    if (i >= total) return;
    int s = i / inner, r = i % inner;
    T acc = 0;
    for (int j = 0; j < n_ids; j++) if (ids[j] == (TI)s) acc += data[(long)j * inner + r];
    out[i] = acc;
}
#endif
#endif

// TopKV2: one work-item per row of n; k passes, each taking the largest value not taken yet (ties: lower index
// first). The taken positions are marked in `taken` (rows * n bytes of scratch).
#if WANT_top_k
__kernel void K(top_k)(GLOBAL(T, values), GLOBAL(int, indices), GLOBAL(const T, x), GLOBAL(uchar, taken),
                       int rows, int n, int k) {
    SHIFT(values); SHIFT(indices); SHIFT(x); SHIFT(taken);
    int row = get_global_id(0);
    if (row >= rows) return;
    __global const T* xr = x + (long)row * n;
    __global uchar* tr = taken + (long)row * n;
    for (int c = 0; c < n; c++) tr[c] = 0;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int c = 0; c < n; c++)
            if (!tr[c] && (best < 0 || xr[c] > xr[best])) best = c;
        tr[best] = 1;
        values[(long)row * k + j] = xr[best];
        indices[(long)row * k + j] = best;
    }
}
#endif
