// Sparse optimizer updates (ops/sparse_training_ops.py). `idx` holds n row indices of a variable of `rows` rows
// of `inner` elements; `vals` holds n rows. Indices out of [0, rows) are skipped (no row is read or written).

// The Scatter ops: ref[idx[i]] = combine(ref[idx[i]], vals[i]), SCATTER_OP naming combine (0 update: the value,
// 1 add, 2 sub, 3 mul, 4 div, 5 min, 6 max). One work-item per (first position of an index, element): it combines
// the rows of every position naming that index in their order, so repeated indices combine in turn (an update
// keeps the last).
#if WANT_scatter
__kernel void K(scatter)(GLOBAL(T, ref), GLOBAL(const TI, idx), GLOBAL(const T, vals), int n, int inner,
                         int rows) {
    SHIFT(ref); SHIFT(idx); SHIFT(vals);
    int g = get_global_id(0);
    if (g >= n * inner) return;
    int i = g / inner, c = g % inner;
    TI at = idx[i];
    if (at < 0 || at >= rows) return;
    for (int j = 0; j < i; j++) if (idx[j] == at) return;
    T acc = ref[(long)at * inner + c];
    for (int j = i; j < n; j++) {
        if (idx[j] != at) continue;
        T v = vals[(long)j * inner + c];
#if SCATTER_OP == 0
        acc = v;
#elif SCATTER_OP == 1
        acc += v;
#elif SCATTER_OP == 2
        acc -= v;
#elif SCATTER_OP == 3
        acc *= v;
#elif SCATTER_OP == 4
        acc /= v;
#elif SCATTER_OP == 5
        acc = fmin(acc, v);
#else
        acc = fmax(acc, v);
#endif
    }
    ref[(long)at * inner + c] = acc;
}
#endif

// out[i] = src[idx[i]] (zeros for an index out of range): the variable's or a slot's rows, into scratch.
#if WANT_gather_rows
__kernel void K(gather_rows)(GLOBAL(T, out), GLOBAL(const T, src), GLOBAL(const TI, idx), int n, int inner,
                             int rows) {
    SHIFT(out); SHIFT(src); SHIFT(idx);
    int g = get_global_id(0);
    if (g >= n * inner) return;
    int i = g / inner, c = g % inner;
    TI at = idx[i];
    out[g] = (at >= 0 && at < rows) ? src[(long)at * inner + c] : (T)0;
}
#endif

// out[i] = the sum of vals[j] over positions j naming idx[i], in j's order (TF1 sums repeated rows before a
// sparse update): every position of an index gets the same sum.
#if WANT_sum_rows
__kernel void K(sum_rows)(GLOBAL(T, out), GLOBAL(const T, vals), GLOBAL(const TI, idx), int n, int inner) {
    SHIFT(out); SHIFT(vals); SHIFT(idx);
    int g = get_global_id(0);
    if (g >= n * inner) return;
    int i = g / inner, c = g % inner;
    TI at = idx[i];
    T acc = 0;
    for (int j = 0; j < n; j++) if (idx[j] == at) acc += vals[(long)j * inner + c];
    out[g] = acc;
}
#endif

// dst[idx[i]] = src[i] for the first position i of each index (the others hold the same row).
#if WANT_scatter_rows
__kernel void K(scatter_rows)(GLOBAL(T, dst), GLOBAL(const T, src), GLOBAL(const TI, idx), int n, int inner,
                              int rows) {
    SHIFT(dst); SHIFT(src); SHIFT(idx);
    int g = get_global_id(0);
    if (g >= n * inner) return;
    int i = g / inner, c = g % inner;
    TI at = idx[i];
    if (at < 0 || at >= rows) return;
    for (int j = 0; j < i; j++) if (idx[j] == at) return;
    dst[(long)at * inner + c] = src[g];
}
#endif
