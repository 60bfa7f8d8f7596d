// Fused recurrent cells (ops/rnn_fused_ops.py, made by tfplus.engine.rewrite_rnn): one launch per time step, one
// work-group per row of the batch. A row's cell is independent of the other rows', so a work-group runs the whole
// step for its row: its work-items share out the gate columns of each product (kernel reads coalesced along a
// row of the kernel), and barriers order the product that reads the other's result (a GRU's candidate reads r * h
// of every unit). The row's intermediate values go through the outputs ([x, h], the gates), which the backward
// reads anyway. Pointer arguments follow common.cl's (buffer, offset) convention.

#define SIGMOID(v) ((T)1 / ((T)1 + exp(-(v))))

// h' of a GRUCell step: xh = [x, h]; gates = sigmoid(xh @ gk + gb) = r | u; xrh = [x, r * h];
// cand = tanh(xrh @ ck + cb); h' = cand + u * (h - cand).
#if WANT_gru_cell
__kernel void K(gru_cell)(GLOBAL(T, new_h), GLOBAL(T, xh), GLOBAL(T, gates), GLOBAL(T, xrh), GLOBAL(T, cand),
                          GLOBAL(const T, x), GLOBAL(const T, h), GLOBAL(const T, gk), GLOBAL(const T, gb),
                          GLOBAL(const T, ck), GLOBAL(const T, cb), int D, int H) {
    SHIFT(new_h); SHIFT(xh); SHIFT(gates); SHIFT(xrh); SHIFT(cand);
    SHIFT(x); SHIFT(h); SHIFT(gk); SHIFT(gb); SHIFT(ck); SHIFT(cb);
    const int b = get_group_id(0), l = get_local_id(0), L = get_local_size(0), K = D + H;
    __global T* row = xh + (long)b * K;
    __global T* g = gates + (long)b * 2 * H;
    __global T* rrow = xrh + (long)b * K;
    __global const T* hb = h + (long)b * H;
    for (int k = l; k < K; k += L) row[k] = k < D ? x[(long)b * D + k] : hb[k - D];
    barrier(CLK_GLOBAL_MEM_FENCE);
    for (int j = l; j < 2 * H; j += L) {
        T acc = 0;
        for (int k = 0; k < K; ++k) acc += row[k] * gk[(long)k * 2 * H + j];
        g[j] = SIGMOID(acc + gb[j]);
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
    for (int k = l; k < K; k += L) rrow[k] = k < D ? row[k] : g[k - D] * hb[k - D];
    barrier(CLK_GLOBAL_MEM_FENCE);
    for (int j = l; j < H; j += L) {
        T acc = 0;
        for (int k = 0; k < K; ++k) acc += rrow[k] * ck[(long)k * H + j];
        const T c = tanh(acc + cb[j]);
        cand[(long)b * H + j] = c;
        new_h[(long)b * H + j] = c + g[H + j] * (hb[j] - c);
    }
}
#endif

// The gradient of a GRUCell step from dh' (outputs: d gates before the sigmoid, d cand before the tanh, dx, dh).
#if WANT_gru_cell_grad
__kernel void K(gru_cell_grad)(GLOBAL(T, d_gates), GLOBAL(T, d_cand), GLOBAL(T, dx), GLOBAL(T, dh),
                               GLOBAL(const T, dh_new), GLOBAL(const T, h), GLOBAL(const T, gates),
                               GLOBAL(const T, cand), GLOBAL(const T, gk), GLOBAL(const T, ck), int D, int H) {
    SHIFT(d_gates); SHIFT(d_cand); SHIFT(dx); SHIFT(dh);
    SHIFT(dh_new); SHIFT(h); SHIFT(gates); SHIFT(cand); SHIFT(gk); SHIFT(ck);
    const int b = get_group_id(0), l = get_local_id(0), L = get_local_size(0), K = D + H;
    __global T* dg = d_gates + (long)b * 2 * H;
    __global T* dc = d_cand + (long)b * H;
    __global T* dxb = dx + (long)b * D;
    __global T* dhb = dh + (long)b * H;
    __global const T* g = gates + (long)b * 2 * H;
    __global const T* hb = h + (long)b * H;
    for (int j = l; j < H; j += L) {
        const T dy = dh_new[(long)b * H + j], u = g[H + j], c = cand[(long)b * H + j];
        dg[H + j] = dy * (hb[j] - c) * (u * ((T)1 - u));
        dhb[j] = dy * u;
        dc[j] = (dy - dy * u) * ((T)1 - c * c);
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
    for (int k = l; k < K; k += L) {  // d[x, r * h] = d cand @ ck^T
        T acc = 0;
        for (int j = 0; j < H; ++j) acc += dc[j] * ck[(long)k * H + j];
        if (k < D) {
            dxb[k] = acc;
        } else {
            const T r = g[k - D];
            dhb[k - D] += acc * r;
            dg[k - D] = acc * hb[k - D] * (r * ((T)1 - r));
        }
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
    for (int k = l; k < K; k += L) {  // d[x, h] = d gates @ gk^T
        T acc = 0;
        for (int j = 0; j < 2 * H; ++j) acc += dg[j] * gk[(long)k * 2 * H + j];
        if (k < D) dxb[k] += acc; else dhb[k - D] += acc;
    }
}
#endif

// h', c' of an LSTM step: acts = sigmoid(i) | tanh(j) | sigmoid(f + forget_bias) | sigmoid(o) of [x, h] @ k + bias;
// c' = c * sigmoid(f + fb) + sigmoid(i) * tanh(j); h' = tanh(c') * sigmoid(o).
#if WANT_lstm_cell
__kernel void K(lstm_cell)(GLOBAL(T, new_h), GLOBAL(T, new_c), GLOBAL(T, xh), GLOBAL(T, acts), GLOBAL(T, tanh_c),
                           GLOBAL(const T, x), GLOBAL(const T, h), GLOBAL(const T, c), GLOBAL(const T, w),
                           GLOBAL(const T, bias), T forget_bias, int D, int H) {
    SHIFT(new_h); SHIFT(new_c); SHIFT(xh); SHIFT(acts); SHIFT(tanh_c);
    SHIFT(x); SHIFT(h); SHIFT(c); SHIFT(w); SHIFT(bias);
    const int b = get_group_id(0), l = get_local_id(0), L = get_local_size(0), K = D + H;
    __global T* row = xh + (long)b * K;
    __global T* a = acts + (long)b * 4 * H;
    for (int k = l; k < K; k += L) row[k] = k < D ? x[(long)b * D + k] : h[(long)b * H + k - D];
    barrier(CLK_GLOBAL_MEM_FENCE);
    for (int j = l; j < 4 * H; j += L) {
        T acc = 0;
        for (int k = 0; k < K; ++k) acc += row[k] * w[(long)k * 4 * H + j];
        acc += bias[j];
        const int gate = j / H;
        a[j] = gate == 1 ? tanh(acc) : SIGMOID(gate == 2 ? acc + forget_bias : acc);
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
    for (int j = l; j < H; j += L) {
        const long o = (long)b * H + j;
        const T nc = c[o] * a[2 * H + j] + a[j] * a[H + j];
        const T tc = tanh(nc);
        new_c[o] = nc;
        tanh_c[o] = tc;
        new_h[o] = tc * a[3 * H + j];
    }
}
#endif

// The gradient of an LSTM step from dh' and (HAS_DC) dc' (outputs: d [i, j, f, o] before the activations, dx,
// dh, dc).
#if WANT_lstm_cell_grad
__kernel void K(lstm_cell_grad)(GLOBAL(T, d_gates), GLOBAL(T, dx), GLOBAL(T, dh), GLOBAL(T, dc),
                                GLOBAL(const T, dh_new), GLOBAL(const T, c), GLOBAL(const T, acts),
                                GLOBAL(const T, tanh_c), GLOBAL(const T, w), GLOBAL(const T, dc_new), int D, int H) {
    SHIFT(d_gates); SHIFT(dx); SHIFT(dh); SHIFT(dc);
    SHIFT(dh_new); SHIFT(c); SHIFT(acts); SHIFT(tanh_c); SHIFT(w);
#if HAS_DC
    SHIFT(dc_new);
#endif
    const int b = get_group_id(0), l = get_local_id(0), L = get_local_size(0), K = D + H;
    __global T* dg = d_gates + (long)b * 4 * H;
    __global const T* a = acts + (long)b * 4 * H;
    for (int j = l; j < H; j += L) {
        const long o = (long)b * H + j;
        const T i = a[j], jj = a[H + j], f = a[2 * H + j], og = a[3 * H + j], tc = tanh_c[o], dy = dh_new[o];
        T total = dy * og * ((T)1 - tc * tc);
#if HAS_DC
        total += dc_new[o];
#endif
        dg[j] = total * jj * (i * ((T)1 - i));
        dg[H + j] = total * i * ((T)1 - jj * jj);
        dg[2 * H + j] = total * c[o] * (f * ((T)1 - f));
        dg[3 * H + j] = dy * tc * (og * ((T)1 - og));
        dc[o] = total * f;
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
    for (int k = l; k < K; k += L) {  // d[x, h] = d gates @ w^T
        T acc = 0;
        for (int j = 0; j < 4 * H; ++j) acc += dg[j] * w[(long)k * 4 * H + j];
        if (k < D) dx[(long)b * D + k] = acc; else dh[(long)b * H + k - D] = acc;
    }
}
#endif
