// Reductions. Each output o (row-major over the kept dims; offsets from kshape/kst) reduces n_red input elements
// (row-major over the reduced dims; offsets from rshape/rst). ACC is the accumulator type (T for floats, long
// for integers), FINAL(acc) is applied once at the end (Mean divides by the count, L2Loss by 2).
// _rows: one work-item per output, for short reductions. _wg: a work-group of RL items per (chunk, output);
// with several chunks each writes a partial result and a second _rows pass (sum/max/...) combines them.

#if IS_FLOAT
#define ACC T
#define IS_NAN(x) isnan(x)
#else
#define ACC long
#define IS_NAN(x) 0
#endif

inline int red_offset(int r, int rank, int8 shape, int8 st) {
    return rank == 1 ? r * st.s0 : strided_offset(r, rank, shape, st);
}

#define OP_SUM(a, b) ((a) + (b))
#define OP_MUL(a, b) ((a) * (b))
#define OP_MAX(a, b) (((a) > (b) || IS_NAN(a)) ? (a) : (b))
#define OP_MIN(a, b) (((a) < (b) || IS_NAN(a)) ? (a) : (b))
#define OP_ALL(a, b) ((a) && (b))
#define OP_ANY(a, b) ((a) || (b))
#define PRE_ID(x) ((ACC)(x))
#define PRE_SQ(x) ((ACC)(x) * (ACC)(x))

// Both variants: NAME_rows and NAME_wg.
#define REDUCE(NAME, INIT, OP, PRE) \
__kernel void PASTE(NAME##_rows_, SFX)(GLOBAL(T, out), GLOBAL(const T, in), int n_out, int n_red, \
                             int krank, int8 kshape, int8 kst, int rrank, int8 rshape, int8 rst, ACC div) { \
    SHIFT(out); SHIFT(in); \
    int o = get_global_id(0); \
    if (o >= n_out) return; \
    int base = strided_offset(o, krank, kshape, kst); \
    ACC acc = INIT; \
    for (int r = 0; r < n_red; r++) acc = OP(acc, PRE(in[base + red_offset(r, rrank, rshape, rst)])); \
    out[o] = (T)(acc / div); \
} \
__kernel __attribute__((reqd_work_group_size(RL, 1, 1))) \
void PASTE(NAME##_wg_, SFX)(GLOBAL(T, out), GLOBAL(const T, in), int n_out, int n_red, int chunk, \
                  int krank, int8 kshape, int8 kst, int rrank, int8 rshape, int8 rst, ACC div) { \
    SHIFT(out); SHIFT(in); \
    __local ACC sh[RL]; \
    int lid = get_local_id(0), c = get_group_id(0), o = get_group_id(1); \
    int base = strided_offset(o, krank, kshape, kst); \
    int r = c * chunk + lid, r1 = min(n_red, (c + 1) * chunk); \
    ACC acc = INIT; \
    if (rrank <= 2) { /* walk (j, i) without a division per element */ \
        int j = r / rshape.s0, i = r - j * rshape.s0; \
        for (; r < r1; r += RL) { \
            acc = OP(acc, PRE(in[base + j * rst.s1 + i * rst.s0])); \
            for (i += RL; i >= rshape.s0; i -= rshape.s0) j++; \
        } \
    } else { \
        for (; r < r1; r += RL) acc = OP(acc, PRE(in[base + strided_offset(r, rrank, rshape, rst)])); \
    } \
    sh[lid] = acc; \
    barrier(CLK_LOCAL_MEM_FENCE); \
    for (int s = RL / 2; s > 0; s >>= 1) { \
        if (lid < s) sh[lid] = OP(sh[lid], sh[lid + s]); \
        barrier(CLK_LOCAL_MEM_FENCE); \
    } \
    if (lid == 0) out[c * n_out + o] = (T)(sh[0] / div); \
}

#if WANT_sum
REDUCE(sum, 0, OP_SUM, PRE_ID)
#endif
#if WANT_sumsq
REDUCE(sumsq, 0, OP_SUM, PRE_SQ)
#endif
#if WANT_max
REDUCE(max, LOWEST, OP_MAX, PRE_ID)
#endif
#if WANT_min
REDUCE(min, HIGHEST, OP_MIN, PRE_ID)
#endif
#if WANT_prod
REDUCE(prod, 1, OP_MUL, PRE_ID)
#endif
#if WANT_all
REDUCE(all, 1, OP_ALL, PRE_ID)
#endif
#if WANT_any
REDUCE(any, 0, OP_ANY, PRE_ID)
#endif

// ArgMax / ArgMin: the first index of the extreme (the first NaN, if any, as NumPy) along the reduced axis.
#define ARG(NAME, BETTER) \
__kernel void PASTE(NAME##_, SFX)(GLOBAL(TI, out), GLOBAL(const T, in), int n_out, int n_red, \
                      int krank, int8 kshape, int8 kst, int rst) { \
    SHIFT(out); SHIFT(in); \
    int o = get_global_id(0); \
    if (o >= n_out) return; \
    int base = strided_offset(o, krank, kshape, kst); \
    T best = in[base]; \
    int at = 0; \
    for (int r = 1; r < n_red && !IS_NAN(best); r++) { \
        T x = in[base + r * rst]; \
        if (BETTER(x, best) || IS_NAN(x)) { best = x; at = r; } \
    } \
    out[o] = (TI)at; \
}
#define GT(a, b) ((a) > (b))
#define LT(a, b) ((a) < (b))
#if WANT_argmax
ARG(argmax, GT)
#endif
#if WANT_argmin
ARG(argmin, LT)
#endif
