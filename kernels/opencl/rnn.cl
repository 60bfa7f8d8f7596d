// Fused recurrent cells (ops/rnn_fused_ops.py, made by tfplus.engine.rewrite_rnn): one launch per time step, one
// work-group per row of the batch. A row's cell is independent of the other rows', so a work-group runs the whole
// step for its row: its work-items share out the gate columns of each product (kernel reads coalesced along a
// row of the kernel), and barriers order the product that reads the other's result (a GRU's candidate reads r * h
// of every unit). The vector a product multiplies ([x, h], a gradient row) sits in local memory (LOCAL_ROWS=1)
// and the outputs get their copy, or, where the rows do not fit, in the outputs themselves (LOCAL_ROWS=0: a
// "copy" then writes a value onto itself). DEPTH (the input's depth) and UNITS (the units) are compile-time sizes.
// Pointer arguments follow common.cl's (buffer, offset) convention.

#define DH (DEPTH + UNITS)  // the length of [x, h]
#define SYNC() barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)

#define SIGMOID(v) ((T)1 / ((T)1 + exp(-(v))))

// h' of a GRUCell step: xh = [x, h]; gates = sigmoid(xh @ gk + gb) = r | u; xrh = [x, r * h];
// cand = tanh(xrh @ ck + cb); h' = cand + u * (h - cand).
#if WANT_gru_cell
__kernel void K(gru_cell)(GLOBAL(T, new_h), GLOBAL(T, xh), GLOBAL(T, gates), GLOBAL(T, xrh), GLOBAL(T, cand),
                          GLOBAL(const T, x), GLOBAL(const T, h), GLOBAL(const T, gk), GLOBAL(const T, gb),
                          GLOBAL(const T, ck), GLOBAL(const T, cb)) {
    SHIFT(new_h); SHIFT(xh); SHIFT(gates); SHIFT(xrh); SHIFT(cand);
    SHIFT(x); SHIFT(h); SHIFT(gk); SHIFT(gb); SHIFT(ck); SHIFT(cb);
    const int b = get_group_id(0), l = get_local_id(0), L = get_local_size(0);
#if LOCAL_ROWS
    __local T row[DH], g[2 * UNITS];
#else
    __global T* row = xrh + (long)b * DH;  // [x, h] until it becomes [x, r * h]
    __global T* g = gates + (long)b * 2 * UNITS;
#endif
    __global const T* hb = h + (long)b * UNITS;
    for (int k = l; k < DH; k += L) row[k] = xh[(long)b * DH + k] = k < DEPTH ? x[(long)b * DEPTH + k] : hb[k - DEPTH];
    SYNC();
    for (int j = l; j < 2 * UNITS; j += L) {
        T acc = 0;
        for (int k = 0; k < DH; ++k) acc += row[k] * gk[k * 2 * UNITS + j];
        g[j] = gates[(long)b * 2 * UNITS + j] = SIGMOID(acc + gb[j]);
    }
    SYNC();
    for (int k = DEPTH + l; k < DH; k += L) row[k] = g[k - DEPTH] * hb[k - DEPTH];   // [x, r * h]
    SYNC();
    for (int k = l; k < DH; k += L) xrh[(long)b * DH + k] = row[k];
    for (int j = l; j < UNITS; j += L) {
        T acc = 0;
        for (int k = 0; k < DH; ++k) acc += row[k] * ck[k * UNITS + j];
        const T c = tanh(acc + cb[j]);
        cand[(long)b * UNITS + j] = c;
        new_h[(long)b * UNITS + j] = c + g[UNITS + j] * (hb[j] - c);
    }
}
#endif

// The gradient of a GRUCell step from dh' (outputs: d gates before the sigmoid, d cand before the tanh, dx, dh).
#if WANT_gru_cell_grad
__kernel void K(gru_cell_grad)(GLOBAL(T, d_gates), GLOBAL(T, d_cand), GLOBAL(T, dx), GLOBAL(T, dh),
                               GLOBAL(const T, dh_new), GLOBAL(const T, h), GLOBAL(const T, gates),
                               GLOBAL(const T, cand), GLOBAL(const T, gk), GLOBAL(const T, ck)) {
    SHIFT(d_gates); SHIFT(d_cand); SHIFT(dx); SHIFT(dh);
    SHIFT(dh_new); SHIFT(h); SHIFT(gates); SHIFT(cand); SHIFT(gk); SHIFT(ck);
    const int b = get_group_id(0), l = get_local_id(0), L = get_local_size(0);
#if LOCAL_ROWS
    __local T dg[2 * UNITS], dc[UNITS];
#else
    __global T* dg = d_gates + (long)b * 2 * UNITS;
    __global T* dc = d_cand + (long)b * UNITS;
#endif
    __global T* dxb = dx + (long)b * DEPTH;
    __global T* dhb = dh + (long)b * UNITS;
    __global const T* g = gates + (long)b * 2 * UNITS;
    __global const T* hb = h + (long)b * UNITS;
    for (int j = l; j < UNITS; j += L) {
        const T dy = dh_new[(long)b * UNITS + j], u = g[UNITS + j], c = cand[(long)b * UNITS + j];
        dg[UNITS + j] = dy * (hb[j] - c) * (u * ((T)1 - u));
        dhb[j] = dy * u;
        dc[j] = d_cand[(long)b * UNITS + j] = (dy - dy * u) * ((T)1 - c * c);
    }
    SYNC();
    for (int k = l; k < DH; k += L) {  // d[x, r * h] = d cand @ ck^T
        T acc = 0;
        for (int j = 0; j < UNITS; ++j) acc += dc[j] * ck[k * UNITS + j];
        if (k < DEPTH) {
            dxb[k] = acc;
        } else {
            const T r = g[k - DEPTH];
            dhb[k - DEPTH] += acc * r;
            dg[k - DEPTH] = acc * hb[k - DEPTH] * (r * ((T)1 - r));
        }
    }
    SYNC();
    for (int j = l; j < 2 * UNITS; j += L) d_gates[(long)b * 2 * UNITS + j] = dg[j];
    for (int k = l; k < DH; k += L) {  // d[x, h] = d gates @ gk^T
        T acc = 0;
        for (int j = 0; j < 2 * UNITS; ++j) acc += dg[j] * gk[k * 2 * UNITS + j];
        if (k < DEPTH) dxb[k] += acc; else dhb[k - DEPTH] += acc;
    }
}
#endif

// h', c' of an LSTM step: acts = sigmoid(i) | tanh(j) | sigmoid(f + forget_bias) | sigmoid(o) of [x, h] @ k + bias;
// c' = c * sigmoid(f + fb) + sigmoid(i) * tanh(j); h' = tanh(c') * sigmoid(o).
#if WANT_lstm_cell
__kernel void K(lstm_cell)(GLOBAL(T, new_h), GLOBAL(T, new_c), GLOBAL(T, xh), GLOBAL(T, acts), GLOBAL(T, tanh_c),
                           GLOBAL(const T, x), GLOBAL(const T, h), GLOBAL(const T, c), GLOBAL(const T, w),
                           GLOBAL(const T, bias), T forget_bias) {
    SHIFT(new_h); SHIFT(new_c); SHIFT(xh); SHIFT(acts); SHIFT(tanh_c);
    SHIFT(x); SHIFT(h); SHIFT(c); SHIFT(w); SHIFT(bias);
    const int b = get_group_id(0), l = get_local_id(0), L = get_local_size(0);
#if LOCAL_ROWS
    __local T row[DH], a[4 * UNITS];
#else
    __global T* row = xh + (long)b * DH;
    __global T* a = acts + (long)b * 4 * UNITS;
#endif
    for (int k = l; k < DH; k += L) row[k] = xh[(long)b * DH + k] = k < DEPTH ? x[(long)b * DEPTH + k] : h[(long)b * UNITS + k - DEPTH];
    SYNC();
    for (int j = l; j < 4 * UNITS; j += L) {
        T acc = 0;
        for (int k = 0; k < DH; ++k) acc += row[k] * w[k * 4 * UNITS + j];
        acc += bias[j];
        const int gate = j / UNITS;
        a[j] = acts[(long)b * 4 * UNITS + j] = gate == 1 ? tanh(acc) : SIGMOID(gate == 2 ? acc + forget_bias : acc);
    }
    SYNC();
    for (int j = l; j < UNITS; j += L) {
        const long o = (long)b * UNITS + j;
        const T nc = c[o] * a[2 * UNITS + j] + a[j] * a[UNITS + j];
        const T tc = tanh(nc);
        new_c[o] = nc;
        tanh_c[o] = tc;
        new_h[o] = tc * a[3 * UNITS + j];
    }
}
#endif

// The gradient of an LSTM step from dh' and (HAS_DC) dc' (outputs: d [i, j, f, o] before the activations, dx,
// dh, dc).
#if WANT_lstm_cell_grad
__kernel void K(lstm_cell_grad)(GLOBAL(T, d_gates), GLOBAL(T, dx), GLOBAL(T, dh), GLOBAL(T, dc),
                                GLOBAL(const T, dh_new), GLOBAL(const T, c), GLOBAL(const T, acts),
                                GLOBAL(const T, tanh_c), GLOBAL(const T, w), GLOBAL(const T, dc_new)) {
    SHIFT(d_gates); SHIFT(dx); SHIFT(dh); SHIFT(dc);
    SHIFT(dh_new); SHIFT(c); SHIFT(acts); SHIFT(tanh_c); SHIFT(w);
#if HAS_DC
    SHIFT(dc_new);
#endif
    const int b = get_group_id(0), l = get_local_id(0), L = get_local_size(0);
#if LOCAL_ROWS
    __local T dg[4 * UNITS];
#else
    __global T* dg = d_gates + (long)b * 4 * UNITS;
#endif
    __global const T* a = acts + (long)b * 4 * UNITS;
    for (int j = l; j < UNITS; j += L) {
        const long o = (long)b * UNITS + j;
        const T i = a[j], jj = a[UNITS + j], f = a[2 * UNITS + j], og = a[3 * UNITS + j], tc = tanh_c[o], dy = dh_new[o];
        T total = dy * og * ((T)1 - tc * tc);
#if HAS_DC
        total += dc_new[o];
#endif
        dg[j] = total * jj * (i * ((T)1 - i));
        dg[UNITS + j] = total * i * ((T)1 - jj * jj);
        dg[2 * UNITS + j] = total * c[o] * (f * ((T)1 - f));
        dg[3 * UNITS + j] = dy * tc * (og * ((T)1 - og));
        dc[o] = total * f;
    }
    SYNC();
    for (int j = l; j < 4 * UNITS; j += L) d_gates[(long)b * 4 * UNITS + j] = dg[j];
    for (int k = l; k < DH; k += L) {  // d[x, h] = d gates @ w^T
        T acc = 0;
        for (int j = 0; j < 4 * UNITS; ++j) acc += dg[j] * w[k * 4 * UNITS + j];
        if (k < DEPTH) dx[(long)b * DEPTH + k] = acc; else dh[(long)b * UNITS + k - DEPTH] = acc;
    }
}
#endif

// _FusedMatMulSum over up to 8 pairs per launch: out[k, m] (+)= sum over the pairs s and rows r of a_s[r, k] *
// g_s[r, m], and (the work-groups of the first row of k tiles) colsum[m] (+)= sum of g_s[r, m]; FIRST: write,
// else add to what the previous launch wrote. TILE x TILE work-groups, each an output tile, stage TILE rows of
// a and of g in local memory at a time (both read coalesced along their rows).
#if WANT_matmul_sum
__kernel void K(matmul_sum)(GLOBAL(T, out), GLOBAL(T, colsum),
                            GLOBAL(const T, a0), GLOBAL(const T, a1), GLOBAL(const T, a2), GLOBAL(const T, a3),
                            GLOBAL(const T, a4), GLOBAL(const T, a5), GLOBAL(const T, a6), GLOBAL(const T, a7),
                            GLOBAL(const T, g0), GLOBAL(const T, g1), GLOBAL(const T, g2), GLOBAL(const T, g3),
                            GLOBAL(const T, g4), GLOBAL(const T, g5), GLOBAL(const T, g6), GLOBAL(const T, g7),
                            int pairs, int rows, int KA, int MG, int first) {
    SHIFT(out); SHIFT(colsum);
    SHIFT(a0); SHIFT(a1); SHIFT(a2); SHIFT(a3); SHIFT(a4); SHIFT(a5); SHIFT(a6); SHIFT(a7);
    SHIFT(g0); SHIFT(g1); SHIFT(g2); SHIFT(g3); SHIFT(g4); SHIFT(g5); SHIFT(g6); SHIFT(g7);
    __local T ta[TILE][TILE + 1], tg[TILE][TILE + 1];
    const int l0 = get_local_id(0), l1 = get_local_id(1);
    const int m0 = get_group_id(0) * TILE, k0 = get_group_id(1) * TILE;
    __global const T* as[8] = {a0, a1, a2, a3, a4, a5, a6, a7};
    __global const T* gs[8] = {g0, g1, g2, g3, g4, g5, g6, g7};
    T acc = 0, cs = 0;
    for (int s = 0; s < pairs; ++s) {
        __global const T* a = as[s];
        __global const T* g = gs[s];
        for (int r0 = 0; r0 < rows; r0 += TILE) {
            const int r = r0 + l1;
            ta[l1][l0] = r < rows && k0 + l0 < KA ? a[(long)r * KA + k0 + l0] : (T)0;
            tg[l1][l0] = r < rows && m0 + l0 < MG ? g[(long)r * MG + m0 + l0] : (T)0;
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int i = 0; i < TILE; ++i) {
                acc += ta[i][l1] * tg[i][l0];
                cs += tg[i][l0];
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
    const int k = k0 + l1, m = m0 + l0;
    if (k < KA && m < MG) {
        const long o = (long)k * MG + m;
        out[o] = first ? acc : out[o] + acc;
        if (k == 0) colsum[m] = first ? cs : colsum[m] + cs;
    }
}
#endif
