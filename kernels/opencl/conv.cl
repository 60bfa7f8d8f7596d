// Convolutions as implicit GEMMs: no im2col buffer; a small table (int4 per k, built on the host once per
// geometry) says where the k-th filter tap reads. Tensors are read through strides, so NCHW and NHWC share code.
//
// conv: out[n = (b, oh, ow), m] = sum_k A[m, k] * B[k, n] with
//   A[m, k] = w[tab[k].x + m * sam]                        (the filter, or the flipped filter for dx)
//   B[k, n] = x[b*xN + ih0*xH + iw0*xW + tab[k].y]         where (ih0 + tab[k].z, iw0 + tab[k].w) is in bounds,
//   ih0 = oh*sh - ph, iw0 = ow*sw - pw. It computes Conv2D, and Conv2DBackpropInput as a stride-1 conv of dy
//   with the flipped filter; with STRIDED (dx of a strided conv) tab[k].y holds only the channel offset and
//   the row is (ih0 + tab[k].z) / SH when that divides exactly.
// conv_wgrad: dw[m = (kh, kw, ci), n = co] = sum over p = (b, oh, ow) of x[...] * dy[...], each split of the
//   p range (get_group_id(2)) writing its own partial sum into `out`; with `finish`, the last split of each tile
//   adds them up into dw (gemm.cl's GEMM_SPLIT_FINISH), else a second pass does (conv.py).
//   With BIAS_ROW (_FusedConv2DBackpropFilterBiasAddGrad) the GEMM has one row more, M - 1, whose A is 1 at every
//   p: its sums are BiasAddGrad(dy), stored into db (a launch and a pass over dy less than BiasAddGrad's own).
#ifndef BIAS_ROW
#define BIAS_ROW 0
#endif
// The groups of a tile row that holds the ones row alone (M - 1 a multiple of TM: conv4's and conv5's 576 rows at
// a 64-row tile) add their dy slice up instead of multiplying out a tile of zeros: that row costs a pass over its
// dy tiles, not a GEMM's work. The same sums in the same order as the products (1 * b is b).
#define WGRAD_ONES_TILE { \
        for (int kk = 0; kk < TK; kk++) for (int j = 0; j < WN; j++) acc[0][j] += Bs[kk][GEMM_COL(j)]; \
    }
// A filter gradient's sum of row m, column n: the ones row's into db, the others into dw (or a layer of partials).
#define WGRAD_STORE(dst, m, n, v) { \
        if (BIAS_ROW && (m) == M - 1) db[n] = (v); \
        else (dst)[(m) * N + (n)] = (v); \
    }

// EPILOGUE (_FusedConv2DBiasRelu): 1 writes max(acc + bias[m], 0), 2 clamps it to [0, 6] (Relu6); the same
// arithmetic as fused.cl's fused_bias_relu over the conv's output. 3 and 4 (_FusedConv2DBackpropInputReluGrad, an
// input gradient): `bias` holds the ReLU's features, laid out as the output, and output element i is acc times the
// ReLU's (3: features > 0) or Relu6's (4: 0 < features < 6) gradient there, a multiply as nn.cl's relu_grad, so
// that no relu_grad pass reads the gradient back. Without an EPILOGUE, `bias` is not read.
#ifndef EPILOGUE
#define EPILOGUE 0
#endif
#if EPILOGUE == 1
#define CONV_EPI(v, m, i) fmax((v) + bias[m], (T)0)
#elif EPILOGUE == 2
#define CONV_EPI(v, m, i) clamp((v) + bias[m], (T)0, (T)6)
#elif EPILOGUE == 3
#define CONV_EPI(v, m, i) ((v) * (T)(bias[i] > (T)0))
#elif EPILOGUE == 4
#define CONV_EPI(v, m, i) ((v) * (T)(bias[i] > (T)0 && bias[i] < (T)6))
#else
#define CONV_EPI(v, m, i) (v)
#endif

// Split K (conv.py: a small output, e.g. the last layers' at a small batch, leaves most of the device idle over
// a long sum): work-group layer z sums k in [z * chunk, (z + 1) * chunk) into layers + z * M * N (row m, column n)
// and the last layer of each tile adds them up into `out` (gemm.cl's GEMM_SPLIT_FINISH), with the epilogue.

#if WANT_conv
__kernel GEMM_ATTR void K(conv)(GLOBAL(T, out), GLOBAL(const T, x), GLOBAL(const T, w),
                                GLOBAL(const int4, tab), GLOBAL(const T, bias), GLOBAL(T, layers),
                                GLOBAL(int, done), int M, int N, int Kd, int OH,
                                int OW, int H, int W, int xN, int xH, int xW, int oN, int oC, int oH, int oW,
                                int sh, int sw, int ph, int pw, int sam, int SH, int SW, int chunk) {
    SHIFT(out); SHIFT(x); SHIFT(w); SHIFT(tab); SHIFT(bias); SHIFT(layers); SHIFT(done);
    __local int last_;  // GEMM_SPLIT_FINISH's
    const int finish = get_num_groups(2) > 1;
    const int kb = get_group_id(2) * chunk, ke = min(Kd, kb + chunk);
    GEMM_BEGIN
    // This thread's B columns are fixed: find their image positions once.
    int bpos[B_LOADS], bih[B_LOADS], biw[B_LOADS];
    for (int r = 0; r < B_LOADS; r++) {
        B_POS(r, nn, kk);
        int n = n0 + nn;
        bih[r] = -(1 << 28);  // out of range: loads give 0
        biw[r] = 0;
        bpos[r] = 0;
        if (n < N) {
            int ow = n % OW, t = n / OW, oh = t % OH, b = t / OH;
            bih[r] = oh * sh - ph;
            biw[r] = ow * sw - pw;
#if STRIDED
            bpos[r] = b * xN;
#else
            bpos[r] = b * xN + bih[r] * xH + biw[r] * xW;
#endif
        }
    }
#if STRIDED
#define CONV_B(ih, iw, t) ((ih >= 0 && iw >= 0 && ih % SH == 0 && iw % SW == 0 && ih / SH < H && iw / SW < W) \
                           ? x[bpos[r] + (ih / SH) * xH + (iw / SW) * xW + t.y] : (T)0)
#else
#define CONV_B(ih, iw, t) (((uint)ih < (uint)H && (uint)iw < (uint)W) ? x[bpos[r] + t.y] : (T)0)
#endif
    // The next K slice is read from global memory into registers while this one is multiplied out of local
    // memory, so the loads' latency hides behind the arithmetic (-5% of the convolutions' time on the H100).
    T ra[A_LOADS], rb[B_LOADS];
#define CONV_LOAD(k0) \
    for (int r = 0; r < A_LOADS; r++) { \
        A_POS(r, mm, kk); \
        int m = m0 + mm, k = (k0) + kk; \
        ra[r] = (m < M && k < ke) ? w[tab[k].x + m * sam] : (T)0; \
    } \
    for (int r = 0; r < B_LOADS; r++) { \
        B_POS(r, nn, kk); \
        int k = (k0) + kk; \
        int4 t = k < ke ? tab[k] : (int4)(0, 0, -(1 << 28), 0); \
        int ih = bih[r] + t.z, iw = biw[r] + t.w; \
        rb[r] = CONV_B(ih, iw, t); \
    }
    CONV_LOAD(kb)
    for (int k0 = kb; k0 < ke; k0 += TK) {
        for (int r = 0; r < A_LOADS; r++) {
            A_POS(r, mm, kk);
            As[kk][mm] = ra[r];
        }
        for (int r = 0; r < B_LOADS; r++) {
            B_POS(r, nn, kk);
            Bs[kk][nn] = rb[r];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (k0 + TK < ke) {
            CONV_LOAD(k0 + TK)
        }
        GEMM_TILE
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#define GEMM_STORE(m, n, v) { \
        int ow_ = (n) % OW, t_ = (n) / OW; \
        int i_ = (t_ / OH) * oN + (t_ % OH) * oH + ow_ * oW + (m) * oC; \
        out[i_] = CONV_EPI(v, m, i_); \
    }
    if (finish) {
        __global T* layer = layers + get_group_id(2) * M * N;
        for (int i = 0; i < WM; i++) {
            int m = m0 + ty + i * TY;
            for (int j = 0; j < WN; j++) {
                int n = n0 + tx + j * TX;
                if (m < M && n < N) layer[m * N + n] = acc[i][j];
            }
        }
    } else {  // each column's output position found once (GEMM_STORE, for the finishing tail, finds it per element)
        for (int j = 0; j < WN; j++) {
            int n = n0 + tx + j * TX;
            if (n >= N) continue;
            int ow = n % OW, t = n / OW, oh = t % OH, b = t / OH;
            int base = b * oN + oh * oH + ow * oW;
            for (int i = 0; i < WM; i++) {
                int m = m0 + ty + i * TY;
                if (m < M) out[base + m * oC] = CONV_EPI(acc[i][j], m, base + m * oC);
            }
        }
    }
    GEMM_SPLIT_FINISH(layers, done, M, N, N)
#undef GEMM_STORE
}
#endif

#if WANT_conv_small
// conv for a short reduction (KH * KW * CIN taps, at most conv.py's SMALL_K: an image's first layer, 27 for 3x3
// RGB). As a GEMM its tiles idle on so short a K; here each work-item reads its taps once, into registers, and
// adds each into CB output channels, the group's slice of the filter staged in local memory. Sizes are
// compile-time and the loads' loops unrolled, so each stage's loads are in flight together (with a loop of
// dependent loads staging the filter, this kernel was slower than the GEMM), and the CB sums stay in registers.
// The loop over taps is not unrolled: on the H100 that ran conv1 in 23 us instead of 31 but took NVIDIA's
// compiler 1.2-1.8 s instead of 0.25 s, a fresh machine's first step waiting on it. The filter is HWIO: tap
// k = (kh * KW + kw) * CIN + ci is row k. Same order of the sum (k ascending) and EPILOGUE as conv.
#define KD (KH * KW * CIN)
__kernel __attribute__((reqd_work_group_size(LOCAL, 1, 1)))
void K(conv_small)(GLOBAL(T, out), GLOBAL(const T, x), GLOBAL(const T, w), GLOBAL(const T, bias), int M, int N,
                   int OH, int OW, int H, int W, int xN, int xC, int xH, int xW, int oN, int oC, int oH, int oW,
                   int sh, int sw, int ph, int pw) {
    SHIFT(out); SHIFT(x); SHIFT(w); SHIFT(bias);
    __local T ws[KD][CB];
    const int m0 = get_group_id(1) * CB;
#pragma unroll
    for (int r = 0; r < (KD * CB + LOCAL - 1) / LOCAL; r++) {
        int i = r * LOCAL + get_local_id(0), m = m0 + i % CB;
        if (i < KD * CB) ws[i / CB][i % CB] = m < M ? w[i / CB * M + m] : (T)0;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int n = get_global_id(0);
    if (n >= N) return;
    const int ow = n % OW, t = n / OW, oh = t % OH, b = t / OH;
    const int ih0 = oh * sh - ph, iw0 = ow * sw - pw, pos = b * xN + ih0 * xH + iw0 * xW;
    T in[KD];
#pragma unroll
    for (int kh = 0; kh < KH; kh++)
#pragma unroll
        for (int kw = 0; kw < KW; kw++)
#pragma unroll
            for (int ci = 0; ci < CIN; ci++) {
                bool inside = (uint)(ih0 + kh) < (uint)H && (uint)(iw0 + kw) < (uint)W;
                in[(kh * KW + kw) * CIN + ci] = inside ? x[pos + ci * xC + kh * xH + kw * xW] : (T)0;
            }
    T acc[CB];
#pragma unroll
    for (int i = 0; i < CB; i++) acc[i] = 0;
#pragma unroll 1
    for (int k = 0; k < KD; k++)
#pragma unroll
        for (int i = 0; i < CB; i++) acc[i] += ws[k][i] * in[k];
    const int base = b * oN + oh * oH + ow * oW;
#pragma unroll
    for (int i = 0; i < CB; i++) {
        int m = m0 + i;
        if (m < M) {
#if EPILOGUE == 1
            out[base + m * oC] = fmax(acc[i] + bias[m], (T)0);
#elif EPILOGUE == 2
            out[base + m * oC] = clamp(acc[i] + bias[m], (T)0, (T)6);
#else
            out[base + m * oC] = acc[i];
#endif
        }
    }
}
#endif

#if WANT_conv_wgrad
__kernel GEMM_ATTR void K(conv_wgrad)(GLOBAL(T, out), GLOBAL(const T, x), GLOBAL(const T, dy),
                                      GLOBAL(const int4, tab), GLOBAL(T, dw), GLOBAL(T, db), GLOBAL(int, done),
                                      int M, int N,
                                      int P, int chunk, int OH, int OW, int H, int W, int xN, int xH, int xW,
                                      int dN, int dC, int dH, int dW, int sh, int sw, int ph, int pw, int finish) {
    SHIFT(out); SHIFT(x); SHIFT(dy); SHIFT(tab); SHIFT(dw); SHIFT(db); SHIFT(done);
    __local int last_;  // GEMM_SPLIT_FINISH's
    GEMM_BEGIN
    const int p_begin = get_group_id(2) * chunk, p_end = min(P, p_begin + chunk);
    // The filter taps of this thread's A rows are fixed: read their table entries once.
    int4 at[A_LOADS];
    bool one[A_LOADS];  // BIAS_ROW's row of ones
    for (int r = 0; r < A_LOADS; r++) {
        A_POS(r, mm, kk);
        int m = m0 + mm;
        one[r] = BIAS_ROW && m == M - 1;
        at[r] = m < M - BIAS_ROW ? tab[m] : (int4)(0, 0, -(1 << 28), 0);
    }
    // K fast for both operands: this thread's p is the same for all its loads of a slice, and moves TK on per
    // slice; (b, oh, ow) follow it without a division per slice.
    int p = p_begin + tid % TK;
    int ow = p % OW, q = p / OW, oh = q % OH, b = q / OH;
    // As in conv: the next slice is read into registers while this one is multiplied. A load reads at this
    // thread's p and then moves p, and (b, oh, ow) with it, TK on.
    T ra[A_LOADS], rb[B_LOADS];
#define WGRAD_LOAD \
    { \
        bool live = p < p_end; \
        int ih0 = oh * sh - ph, iw0 = ow * sw - pw; \
        int xpos = b * xN + ih0 * xH + iw0 * xW, dpos = b * dN + oh * dH + ow * dW; \
        for (int r = 0; r < A_LOADS; r++) { \
            int ih = ih0 + at[r].z, iw = iw0 + at[r].w; \
            ra[r] = one[r] ? (T)live : (live && (uint)ih < (uint)H && (uint)iw < (uint)W) ? x[xpos + at[r].y] \
                                                                                          : (T)0; \
        } \
        for (int r = 0; r < B_LOADS; r++) { \
            B_POS(r, nn, kk); \
            int n = n0 + nn; \
            rb[r] = (live && n < N) ? dy[dpos + n * dC] : (T)0; \
        } \
        p += TK; \
        for (ow += TK; ow >= OW; ow -= OW) { \
            if (++oh == OH) { \
                oh = 0; \
                b++; \
            } \
        } \
    }
    WGRAD_LOAD
    for (int k0 = p_begin; k0 < p_end; k0 += TK) {
        for (int r = 0; r < A_LOADS; r++) {
            A_POS(r, mm, kk);
            As[kk][mm] = ra[r];
        }
        for (int r = 0; r < B_LOADS; r++) {
            B_POS(r, nn, kk);
            Bs[kk][nn] = rb[r];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (k0 + TK < p_end) WGRAD_LOAD
#if BIAS_ROW
        if (m0 == M - 1) WGRAD_ONES_TILE else
#endif
        GEMM_TILE
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    __global T* part = out + get_group_id(2) * M * N;
    for (int i = 0; i < WM; i++) {
        int m = m0 + ty + i * TY;
        for (int j = 0; j < WN; j++) {
            int n = n0 + tx + j * TX;
            if (m < M && n < N) {
                if (get_num_groups(2) == 1) WGRAD_STORE(part, m, n, acc[i][j])
                else part[m * N + n] = acc[i][j];
            }
        }
    }
#define GEMM_STORE(m, n, v) WGRAD_STORE(dw, m, n, v)
    GEMM_SPLIT_FINISH(out, done, M, N, N)
#undef GEMM_STORE
}
#endif

// -- 3x3, stride 1, SAME (pad 1): the Mentee convolutions (conv.py's TFPLUS_CONV_VARIANTS; a GPU's default) --
// conv3: Conv2D (FLIP 0) or Conv2DBackpropInput (FLIP 1: dy with the flipped filter, padded by 1 as well) of
// IH x IW images whose sum runs over CIN channels a tap, CIN compile-time (the image size is not: a program
// serves every layer of a width, so a cold start builds fewer). k = tap * CIN + c with CIN a multiple of TK, so a
// K slice is one tap: no tap table is read, a B load checks its row and column once a slice, and the slice's tap
// and channel come from divisions by constants. Split K, epilogue and stores as conv's.
// A[m, k] = w[TAP_A(tap) * CIN * M + c * AC + m * AM]: the HWIO filter (m = output channel), or flipped and read
// with the input channel as m. The operands are read through restrict pointers (GLOBAL_RO): no output overlaps
// them, and so NVIDIA's compiler may read them through the read-only data cache (ld.global.nc).
#define GLOBAL_RO(type, p) __global const type* restrict p, ulong p##_off
// The filter operand A of conv3 and of conv3_halo (below), by FLIP.
#if WANT_conv3 || WANT_conv3_halo
#if FLIP
#define TAP_A(t) (8 - (t))
#define AC 1
#define AM CIN
#else
#define TAP_A(t) (t)
#define AC M
#define AM 1
#endif
#endif
#if WANT_conv3
__kernel GEMM_ATTR void K(conv3)(GLOBAL(T, out), GLOBAL_RO(T, x), GLOBAL_RO(T, w), GLOBAL(const T, bias),
                                 GLOBAL(T, layers), GLOBAL(int, done), int M, int N, int IH, int IW, int xN, int xC,
                                 int xH, int xW, int oN, int oC, int oH, int oW, int chunk) {
    SHIFT(out); SHIFT(x); SHIFT(w); SHIFT(bias); SHIFT(layers); SHIFT(done);
    __local int last_;  // GEMM_SPLIT_FINISH's
    const int finish = get_num_groups(2) > 1;
    const int kb = get_group_id(2) * chunk, ke = min(9 * CIN, kb + chunk);
    GEMM_BEGIN_V
    int bpos[B_LOADS], bih[B_LOADS], biw[B_LOADS];
    for (int r = 0; r < B_LOADS; r++) {
        B_POS(r, nn, kk);
        int n = n0 + nn;
        bih[r] = -(1 << 28);  // out of range: loads give 0
        biw[r] = 0;
        bpos[r] = 0;
        if (n < N) {
            int ow = n % IW, t = n / IW, oh = t % IH, b = t / IH;
            bih[r] = oh - 1;
            biw[r] = ow - 1;
            bpos[r] = b * xN + bih[r] * xH + biw[r] * xW;
        }
    }
    T ra[A_LOADS], rb[B_LOADS];
#define CONV3_LOAD(k0) { \
        const int tap = (k0) / CIN, c0 = (k0) % CIN, kh = tap / 3, kw = tap % 3; \
        for (int r = 0; r < A_LOADS; r++) { \
            A_POS(r, mm, kk); \
            int m = m0 + mm; \
            ra[r] = m < M ? w[TAP_A(tap) * CIN * M + (c0 + kk) * AC + m * AM] : (T)0; \
        } \
        for (int r = 0; r < B_LOADS; r++) { \
            B_POS(r, nn, kk); \
            int ih = bih[r] + kh, iw = biw[r] + kw; \
            rb[r] = ((uint)ih < (uint)IH && (uint)iw < (uint)IW) ? x[bpos[r] + (c0 + kk) * xC + kh * xH + kw * xW] \
                                                                 : (T)0; \
        } \
    }
    CONV3_LOAD(kb)
    for (int k0 = kb; k0 < ke; k0 += TK) {
        for (int r = 0; r < A_LOADS; r++) {
            A_POS(r, mm, kk);
            As[kk][mm] = ra[r];
        }
        for (int r = 0; r < B_LOADS; r++) {
            B_POS(r, nn, kk);
            Bs[kk][nn] = rb[r];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (k0 + TK < ke) CONV3_LOAD(k0 + TK)
        GEMM_TILE_V
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#define GEMM_STORE(m, n, v) { \
        int ow_ = (n) % IW, t_ = (n) / IW; \
        int i_ = (t_ / IH) * oN + (t_ % IH) * oH + ow_ * oW + (m) * oC; \
        out[i_] = CONV_EPI(v, m, i_); \
    }
    if (finish) {
        __global T* layer = layers + get_group_id(2) * M * N;
        for (int i = 0; i < WM; i++) {
            int m = m0 + GEMM_ROW(i);
            for (int j = 0; j < WN; j++) {
                int n = n0 + GEMM_COL(j);
                if (m < M && n < N) layer[m * N + n] = acc[i][j];
            }
        }
    } else {
        for (int j = 0; j < WN; j++) {
            int n = n0 + GEMM_COL(j);
            if (n >= N) continue;
            int ow = n % IW, t = n / IW, oh = t % IH, b = t / IH;
            int base = b * oN + oh * oH + ow * oW;
            for (int i = 0; i < WM; i++) {
                int m = m0 + GEMM_ROW(i);
                if (m < M) out[base + m * oC] = CONV_EPI(acc[i][j], m, base + m * oC);
            }
        }
    }
    GEMM_SPLIT_FINISH(layers, done, M, N, N)
#undef GEMM_STORE
}
#endif

// conv3_wgrad: conv_wgrad of a 3x3 stride-1 SAME conv of IH x IW images, rows m = tap * CIN + ci, CIN compile-time:
// each thread's taps come from m by divisions by a constant (no table). Built with A_K_FAST = B_K_FAST = 1 (a
// thread's loads of a slice share p).
#if WANT_conv3_wgrad
__kernel GEMM_ATTR void K(conv3_wgrad)(GLOBAL(T, out), GLOBAL_RO(T, x), GLOBAL_RO(T, dy), GLOBAL(T, dw),
                                       GLOBAL(T, db), GLOBAL(int, done), int M, int N, int P, int chunk, int IH, int IW, int xN,
                                       int xC, int xH, int xW, int dN, int dC, int dH, int dW, int finish) {
    SHIFT(out); SHIFT(x); SHIFT(dy); SHIFT(dw); SHIFT(db); SHIFT(done);
    __local int last_;  // GEMM_SPLIT_FINISH's
    GEMM_BEGIN_V
    const int p_begin = get_group_id(2) * chunk, p_end = min(P, p_begin + chunk);
    int aoff[A_LOADS], akh[A_LOADS], akw[A_LOADS];  // this thread's A rows: offset and (row, column) shift
    bool one[A_LOADS];  // BIAS_ROW's row of ones
    for (int r = 0; r < A_LOADS; r++) {
        A_POS(r, mm, kk);
        int m = m0 + mm, tap = m / CIN;
        one[r] = BIAS_ROW && m == M - 1;
        akh[r] = m < M - BIAS_ROW ? tap / 3 - 1 : -(1 << 28);
        akw[r] = tap % 3 - 1;
        aoff[r] = m < M - BIAS_ROW ? (m % CIN) * xC + akh[r] * xH + akw[r] * xW : 0;
    }
    int p = p_begin + tid % TK;
    int ow = p % IW, q = p / IW, oh = q % IH, b = q / IH;
    T ra[A_LOADS], rb[B_LOADS];
#define WGRAD3_LOAD { \
        bool live = p < p_end; \
        int xpos = b * xN + oh * xH + ow * xW, dpos = b * dN + oh * dH + ow * dW; \
        for (int r = 0; r < A_LOADS; r++) { \
            int ih = oh + akh[r], iw = ow + akw[r]; \
            ra[r] = one[r] ? (T)live : (live && (uint)ih < (uint)IH && (uint)iw < (uint)IW) ? x[xpos + aoff[r]] \
                                                                                            : (T)0; \
        } \
        for (int r = 0; r < B_LOADS; r++) { \
            B_POS(r, nn, kk); \
            int n = n0 + nn; \
            rb[r] = (live && n < N) ? dy[dpos + n * dC] : (T)0; \
        } \
        p += TK; \
        for (ow += TK; ow >= IW; ow -= IW) { \
            if (++oh == IH) { \
                oh = 0; \
                b++; \
            } \
        } \
    }
    WGRAD3_LOAD
    for (int k0 = p_begin; k0 < p_end; k0 += TK) {
        for (int r = 0; r < A_LOADS; r++) {
            A_POS(r, mm, kk);
            As[kk][mm] = ra[r];
        }
        for (int r = 0; r < B_LOADS; r++) {
            B_POS(r, nn, kk);
            Bs[kk][nn] = rb[r];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (k0 + TK < p_end) WGRAD3_LOAD
#if BIAS_ROW
        if (m0 == M - 1) WGRAD_ONES_TILE else
#endif
        GEMM_TILE_V
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    __global T* part = out + get_group_id(2) * M * N;
    for (int i = 0; i < WM; i++) {
        int m = m0 + GEMM_ROW(i);
        for (int j = 0; j < WN; j++) {
            int n = n0 + GEMM_COL(j);
            if (m < M && n < N) {
                if (get_num_groups(2) == 1) WGRAD_STORE(part, m, n, acc[i][j])
                else part[m * N + n] = acc[i][j];
            }
        }
    }
#define GEMM_STORE(m, n, v) WGRAD_STORE(dw, m, n, v)
    GEMM_SPLIT_FINISH(out, done, M, N, N)
#undef GEMM_STORE
}
#endif

// conv3_halo (conv.py's `halo` variant): conv3's Conv2D / Conv2DBackpropInput (FLIP) as a direct convolution. A
// work-group owns TM output channels of ROWS rows of one image (the row width IW, compile-time, padded to IWP, a
// multiple of WN) and steps through the summed channels CC at a time: it stages those channels' input rows with
// their halo (ROWS + 2 rows of IWP + 2 columns, zeros outside the image, so the inner loop checks no bounds) and
// their 9 x TM filter taps in local memory, once each, where conv3 reads every input element again for each of
// the 9 taps it feeds, a bounds check and an index each. A work-item owns WM channels (consecutive) x WN columns
// (consecutive, one row): per channel and filter row it reads WN + 2 inputs (float4 loads, a scalar each side)
// that feed all 3 taps of the row, and WM filter values a tap (float4 loads): 9 x WM x WN multiply-adds for
// about 3 (WN / 4 + 2) + 9 WM / 4 local loads. The next stage is read into registers while this one is multiplied.
// Xs row layout: input column c at index c + 4 (the left halo at 3), rows XROW long: a multiple of 4 (the float4
// loads stay aligned) but not of 8, so that the scalar edge loads of a warp's rows fall in other banks (IWP + 8
// words a row put 4 rows of 8-wide runs in 4 banks: 4-way conflicts). A stage's filter taps of channel c are row c
// of Ws, 9 x TM long and padded by 4, so the flipped filter's channel-fastest stores fall in different banks.
// No split sums (a layer whose tiles do not fill the device keeps them few); the sum
// of each output runs over stages, channels, filter rows, filter columns in turn. Epilogue as conv3's.
#if WANT_conv3_halo
#ifndef KG
#define KG 1
#endif
#define IWP ((IW + WN - 1) / WN * WN)
#define HTX (ROWS * IWP / WN)   // work-items along positions
#define HTY (TM / WM)           // work-items along output channels
#define HNT (HTX * HTY * KG)
#define XROW ((IWP + 8) % 8 ? IWP + 8 : IWP + 12)
#define WROW (9 * TM + 4)
#define XELEMS (CC * (ROWS + 2) * IWP)  // staged inputs a stage (not the halo columns: see below)
#define WELEMS (CC * 9 * TM)                  // staged filter taps a stage
#define X_LOADS ((XELEMS + HNT - 1) / HNT)
#define W_LOADS ((WELEMS + HNT - 1) / HNT)
__kernel __attribute__((reqd_work_group_size(HTX, HTY, KG)))
void K(conv3_halo)(GLOBAL(T, out), GLOBAL_RO(T, x), GLOBAL_RO(T, w), GLOBAL(const T, bias), int M, int IH,
                   int xN, int xC, int xH, int xW, int oN, int oC, int oH, int oW) {
    SHIFT(out); SHIFT(x); SHIFT(w); SHIFT(bias);
    __local T Xs[CC][ROWS + 2][XROW] __attribute__((aligned(16)));
    __local T Ws[CC][WROW] __attribute__((aligned(16)));
    const int tx = get_local_id(0), ty = get_local_id(1), kg = get_local_id(2), tid = (kg * HTY + ty) * HTX + tx;
    const int strips = (IH + ROWS - 1) / ROWS, b = get_group_id(0) / strips, oh0 = get_group_id(0) % strips * ROWS;
    const int m0 = get_group_id(1) * TM;
    const __global T* xb = x + b * xN;
    T acc[WM][WN];
    for (int i = 0; i < WM; i++) for (int j = 0; j < WN; j++) acc[i][j] = 0;
    // A tile spans whole rows, so its halo columns (input columns -1 and IWP) lie outside the image in every
    // stage: zeros, written once (the first stage's barrier orders them before any read).
    for (int e = tid; e < CC * (ROWS + 2); e += HNT) {
        Xs[e % CC][e / CC][3] = 0;
        Xs[e % CC][e / CC][IWP + 4] = 0;
    }
    T rx[X_LOADS], rw[W_LOADS];
    // Stage element e: inputs with the column fastest (neighbouring items read neighbouring addresses), then the
    // channel, then the row; filter taps with the faster of the filter's own axes fastest (m, or c when flipped).
    // Mentee's widths, CC and TM are powers of 2: the positions' divisions are shifts.
#define HALO_X_POS(e, row, c, col) int col = (e) % IWP, c = (e) / IWP % CC, row = (e) / (IWP * CC)
#define HALO_LOAD(c0) { \
        for (int r = 0; r < X_LOADS; r++) { \
            int e = r * HNT + tid; \
            HALO_X_POS(e, row, c, col); \
            int ih = oh0 + row - 1; \
            rx[r] = (e < XELEMS && (uint)ih < (uint)IH && col < IW) ? xb[((c0) + c) * xC + ih * xH + col * xW] : (T)0; \
        } \
        for (int r = 0; r < W_LOADS; r++) { \
            int e = r * HNT + tid; \
            HALO_W_POS(e, tap, c, m); \
            rw[r] = (e < WELEMS && m0 + m < M) ? w[TAP_A(tap) * CIN * M + ((c0) + c) * AC + (m0 + m) * AM] : (T)0; \
        } \
    }
#if FLIP
#define HALO_W_POS(e, tap, c, m) int c = (e) % CC, m = (e) / CC % TM, tap = (e) / (CC * TM)
#else
#define HALO_W_POS(e, tap, c, m) int m = (e) % TM, c = (e) / TM % CC, tap = (e) / (TM * CC)
#endif
    const int p = tx * WN, pr = p / IWP, col0 = p % IWP, mr = ty * WM;
    HALO_LOAD(0)
    for (int c0 = 0; c0 < CIN; c0 += CC) {
        for (int r = 0; r < X_LOADS; r++) {
            int e = r * HNT + tid;
            HALO_X_POS(e, row, c, col);
            if (e < XELEMS) Xs[c][row][col + 4] = rx[r];
        }
        for (int r = 0; r < W_LOADS; r++) {
            int e = r * HNT + tid;
            HALO_W_POS(e, tap, c, m);
            if (e < WELEMS) Ws[c][tap * TM + m] = rw[r];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (c0 + CC < CIN) HALO_LOAD(c0 + CC)
        for (int c = kg; c < CC; c += KG) {
#pragma unroll
            for (int kh = 0; kh < 3; kh++) {
                __local const T* xr_ = &Xs[c][pr + kh][col0 + 3];
                T xr[WN + 2];
                xr[0] = xr_[0];
#pragma unroll
                for (int j = 0; j < WN; j += 4) {
                    T4 v = *(__local const T4*)(xr_ + 1 + j);
                    xr[j + 1] = v.s0; xr[j + 2] = v.s1; xr[j + 3] = v.s2; xr[j + 4] = v.s3;
                }
                xr[WN + 1] = xr_[WN + 1];
#pragma unroll
                for (int kw = 0; kw < 3; kw++) {
                    T a[WM];
#pragma unroll
                    for (int i = 0; i < WM; i += 4) {
                        T4 v = *(__local const T4*)&Ws[c][(kh * 3 + kw) * TM + mr + i];
                        a[i] = v.s0; a[i + 1] = v.s1; a[i + 2] = v.s2; a[i + 3] = v.s3;
                    }
#pragma unroll
                    for (int i = 0; i < WM; i++)
#pragma unroll
                        for (int j = 0; j < WN; j++) acc[i][j] += a[i] * xr[j + kw];
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#if KG > 1
    // The channel groups' sums, added up by group 0 in order (after the stages' last barrier: Xs is free).
    __local T* red = &Xs[0][0][0];
    for (int g = 1; g < KG; g++) {
        if (kg == g)
            for (int i = 0; i < WM; i++) for (int j = 0; j < WN; j++) red[(i * WN + j) * (HTX * HTY) + ty * HTX + tx] = acc[i][j];
        barrier(CLK_LOCAL_MEM_FENCE);
        if (kg == 0)
            for (int i = 0; i < WM; i++) for (int j = 0; j < WN; j++) acc[i][j] += red[(i * WN + j) * (HTX * HTY) + ty * HTX + tx];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (kg) return;
#endif
    const int oh = oh0 + pr;
    if (oh >= IH) return;
    for (int i = 0; i < WM; i++) {
        int m = m0 + mr + i;
        if (m >= M) break;
        int base = b * oN + oh * oH + m * oC;
        for (int j = 0; j < WN; j++) {
            int ow = col0 + j;
            if (ow < IW) out[base + ow * oW] = CONV_EPI(acc[i][j], m, base + ow * oW);
        }
    }
}
#endif

// conv3_wgrad_halo (conv.py's `dwhalo` variant): conv3_wgrad's filter gradient, dw[(tap, ci), co] = sum over
// positions p of x[p + tap, ci] * dy[p, co], as a direct convolution: a work-group owns TCI input channels x TCO
// output channels x all 9 taps and sums over the image rows of its split of the positions (get_group_id(2): row g
// is the split's whose chunk holds the row's first position, so each row is summed once), SR rows a stage. A stage
// stages its dy rows and its x rows with their halo rows in local memory, once each (conv3_wgrad reads an x element
// again for each tap it feeds, a bounds check each); a work-item owns WI input x WO output channels and all their
// taps, and per row, 4 columns and filter row reads WN + 2 = 6 inputs a channel (a float4 and a scalar each side)
// that serve all 3 taps of the filter row, and 4 dy values an output channel (float4): 36 WI WO multiply-adds for
// 9 WI + WO local loads. Global row g = (image, row) and the stage's rows are consecutive global rows: a tap that
// would read across an image's top or bottom edge is skipped for that row (the same for the whole work-group).
// Writes layer z of the partial sums (dw itself when one split); conv.py sums the layers in a second pass.
#if WANT_conv3_wgrad_halo
#define DIWP ((IW + 3) / 4 * 4)
#define DTX (TCO / WO)
#define DTY (TCI / WI)
#define DNT (DTX * DTY)
#define DXROW ((DIWP + 8) % 8 ? DIWP + 8 : DIWP + 12)
#define DXPLANE ((SR + 2) * DXROW % 8 ? (SR + 2) * DXROW : (SR + 2) * DXROW + 4)
#define DDPLANE (SR * DIWP + 4)
__kernel __attribute__((reqd_work_group_size(DTX, DTY, 1)))
void K(conv3_wgrad_halo)(GLOBAL(T, out), GLOBAL_RO(T, x), GLOBAL_RO(T, dy), int N, int rows, int IH, int chunk,
                         int xN, int xC, int xH, int xW, int dN, int dC, int dH, int dW) {
    SHIFT(out); SHIFT(x); SHIFT(dy);
    __local T Xs[TCI * DXPLANE] __attribute__((aligned(16)));
    __local T Ds[TCO * DDPLANE] __attribute__((aligned(16)));
    __local int xoff[SR + 2], doff[SR], ohs[SR];
    const int tx = get_local_id(0), ty = get_local_id(1), tid = ty * DTX + tx;
    const int co0 = get_group_id(0) * TCO, ci0 = get_group_id(1) * TCI, z = get_group_id(2);
    const int rb = (z * chunk + IW - 1) / IW, re = min(((z + 1) * chunk + IW - 1) / IW, rows);
    for (int e = tid; e < TCI * (SR + 2); e += DNT) {  // the halo columns: outside the image in every stage
        Xs[e / (SR + 2) * DXPLANE + e % (SR + 2) * DXROW + 3] = 0;
        Xs[e / (SR + 2) * DXPLANE + e % (SR + 2) * DXROW + DIWP + 4] = 0;
    }
    T acc[9][WI][WO];
    for (int t = 0; t < 9; t++) for (int i = 0; i < WI; i++) for (int o = 0; o < WO; o++) acc[t][i][o] = 0;
    for (int g0 = rb; g0 < re; g0 += SR) {
        if (tid < SR + 2) {  // the stage's rows: where they start in x (-1: outside the tensor), dy, and image row
            int gr = g0 - 1 + tid;
            xoff[tid] = gr >= 0 && gr < rows ? gr / IH * xN + gr % IH * xH : -1;
            if (tid < SR) {
                int g = g0 + tid;
                doff[tid] = g < re ? g / IH * dN + g % IH * dH : -1;
                ohs[tid] = g < re ? g % IH : -1;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int e = tid; e < TCI * (SR + 2) * DIWP; e += DNT) {
            int col = e % DIWP, row = e / DIWP % (SR + 2), c = e / (DIWP * (SR + 2)), at = xoff[row];
            Xs[c * DXPLANE + row * DXROW + col + 4] =
                at >= 0 && col < IW && ci0 + c < CIN ? x[at + (ci0 + c) * xC + col * xW] : (T)0;
        }
        for (int e = tid; e < TCO * SR * DIWP; e += DNT) {
            int col = e % DIWP, row = e / DIWP % SR, o = e / (DIWP * SR), at = doff[row];
            Ds[o * DDPLANE + row * DIWP + col] = at >= 0 && col < IW && co0 + o < N ? dy[at + (co0 + o) * dC + col * dW]
                                                                                  : (T)0;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int r = 0; r < SR; r++) {
            const int oh = ohs[r];
            if (oh < 0) break;  // past the split's rows (all later ones too)
            for (int q = 0; q < DIWP; q += 4) {
                T d[WO][4];
#pragma unroll
                for (int o = 0; o < WO; o++) {
                    T4 v = *(__local const T4*)&Ds[(tx * WO + o) * DDPLANE + r * DIWP + q];
                    d[o][0] = v.s0; d[o][1] = v.s1; d[o][2] = v.s2; d[o][3] = v.s3;
                }
#pragma unroll
                for (int kh = 0; kh < 3; kh++) {
                    if ((uint)(oh + kh - 1) >= (uint)IH) continue;  // the tap reads across the image's edge
#pragma unroll
                    for (int i = 0; i < WI; i++) {
                        __local const T* xr_ = &Xs[(ty * WI + i) * DXPLANE + (r + kh) * DXROW + q + 3];
                        T4 v = *(__local const T4*)(xr_ + 1);
                        T xr[6] = {xr_[0], v.s0, v.s1, v.s2, v.s3, xr_[5]};
#pragma unroll
                        for (int kw = 0; kw < 3; kw++)
#pragma unroll
                            for (int o = 0; o < WO; o++)
#pragma unroll
                                for (int s = 0; s < 4; s++) acc[kh * 3 + kw][i][o] += xr[s + kw] * d[o][s];
                    }
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    __global T* dst = out + z * 9 * CIN * N;
    for (int t = 0; t < 9; t++)
        for (int i = 0; i < WI; i++) {
            int ci = ci0 + ty * WI + i;
            for (int o = 0; o < WO; o++) {
                int co = co0 + tx * WO + o;
                if (ci < CIN && co < N) dst[(t * CIN + ci) * N + co] = acc[t][i][o];
            }
        }
}
#endif

// conv3_wgrad_tile (conv.py's `dwtile` variant, stop 46): conv3_wgrad's filter gradient dw[(tap, ci), co] = sum over
// positions of x[position + tap, ci] * dy[position, co], a GEMM whose 9 x TCI rows of a tile all read one staged block
// of input rows. A work-group owns TCI input x TCO output channels and all 9 taps, and sums the strips (SR rows of one
// image) of its split of the batch's strips (get_group_id(2): strips [z per, (z + 1) per)). A stage stages the strip's
// SR + 2 input rows (with the halo rows, zeros outside the image, and zero halo columns written once) channel-fastest,
// and its SR dy rows output-channel-fastest, so that a work-item owning one tap's WI input channels x WO output
// channels reads them as float4 runs: WI / 4 + WO / 4 local loads for WI x WO multiply-adds a position, the register
// tile of gemm.cl's VTILE with no gather, no bounds check and no index table (conv3_wgrad reads an input element
// again, bounds-checked, for each tap it feeds). The next stage is read into registers while this one is summed.
// PG groups of work-items (get_local_id(2)) take every PG-th column of a stage's rows and add their sums up in local
// memory at the end: PG times the work-items at the same split scratch. Split layers (one per split, in `out`; dw
// itself when one split) are added up by the last work-group of each tile (as GEMM_SPLIT_FINISH; conv.py runs it
// only where kernels can: reduce.finishes_splits). TCI may exceed CIN (an RGB layer's 3 channels on a tile of 4):
// the rest are zeros.
#if WANT_conv3_wgrad_tile
#define WTX (TCO / WO)
#define WTY (9 * (TCI / WI))
#define WNT (WTX * WTY * PG)
#define XCOLS (IW + 2)
#define CP (TCI + 4)                 // Xs channel run, padded: float4-aligned, and rows of channels in other banks
#define OP (TCO + 4)
#define XST ((SR + 2) * XCOLS * CP)  // Xs elements
#define DST (SR * IW * OP)
#define RED (WNT / PG * WI * WO)     // the PG reduction's elements
#define LOCAL_N (XST + DST > RED ? XST + DST : RED)
#define XEL (TCI * (SR + 2) * IW)    // inputs staged a stage (not the halo columns)
#define DEL (TCO * SR * IW)
#define XL ((XEL + WNT - 1) / WNT)
#define DL ((DEL + WNT - 1) / WNT)
// A work-item's output channel j: its runs of 4 lie 4 WTX apart (as gemm.cl's GEMM_COL), so that neighbouring
// work-items' float4 reads of a dy row are neighbouring (no bank conflicts), not WO apart.
#define DWT_CO(j) (((j) & ~3) * WTX + tx * 4 + ((j) & 3))
#define DWT_BATCH 16  // partials a finishing work-item has in flight
__kernel __attribute__((reqd_work_group_size(WTX, WTY, PG)))
void K(conv3_wgrad_tile)(GLOBAL(T, out), GLOBAL_RO(T, x), GLOBAL_RO(T, dy), GLOBAL(T, dw), GLOBAL(int, done), int N,
                         int IH, int strips, int per, int xN, int xC, int xH, int xW, int dN, int dC, int dH, int dW) {
    SHIFT(out); SHIFT(x); SHIFT(dy); SHIFT(dw); SHIFT(done);
    __local T L[LOCAL_N] __attribute__((aligned(16)));
    __local T* Xs = L;
    __local T* Ds = L + XST;
    __local int last_;
    const int tx = get_local_id(0), ty = get_local_id(1), pg = get_local_id(2);
    const int tid = (pg * WTY + ty) * WTX + tx;
    const int co0 = get_group_id(0) * TCO, ci0 = get_group_id(1) * TCI, z = get_group_id(2);
    const int tap = ty / (TCI / WI), cw = ty % (TCI / WI) * WI, kh = tap / 3, kw = tap % 3;
    const int spi = (IH + SR - 1) / SR;  // strips an image
    const int s_begin = z * per, s_end = min(strips, s_begin + per);
    for (int e = tid; e < (SR + 2) * CP; e += WNT) {  // the halo columns: zeros in every stage
        Xs[(e / CP * XCOLS) * CP + e % CP] = 0;
        Xs[(e / CP * XCOLS + IW + 1) * CP + e % CP] = 0;
    }
    T acc[WI][WO];
    for (int i = 0; i < WI; i++) for (int j = 0; j < WO; j++) acc[i][j] = 0;
    T rx[XL], rd[DL];
    // Stage element e: the column fastest (neighbouring work-items read neighbouring addresses of NCHW), then the
    // channel, then the row.
#define DWT_LOAD(s) { \
        const int b_ = (s) / spi, oh0_ = (s) % spi * SR; \
        for (int r = 0; r < XL; r++) { \
            int e = r * WNT + tid, col = e % IW, c = e / IW % TCI, row = e / (IW * TCI), ih = oh0_ + row - 1; \
            rx[r] = (e < XEL && (uint)ih < (uint)IH && ci0 + c < CIN) ? \
                x[b_ * xN + (ci0 + c) * xC + ih * xH + col * xW] : (T)0; \
        } \
        for (int r = 0; r < DL; r++) { \
            int e = r * WNT + tid, col = e % IW, o = e / IW % TCO, row = e / (IW * TCO), oh = oh0_ + row; \
            rd[r] = (e < DEL && oh < IH && co0 + o < N) ? dy[b_ * dN + (co0 + o) * dC + oh * dH + col * dW] : (T)0; \
        } \
    }
    if (s_begin < s_end) DWT_LOAD(s_begin)
    for (int s = s_begin; s < s_end; s++) {
        for (int r = 0; r < XL; r++) {
            int e = r * WNT + tid, col = e % IW, c = e / IW % TCI, row = e / (IW * TCI);
            if (e < XEL) Xs[(row * XCOLS + col + 1) * CP + c] = rx[r];
        }
        for (int r = 0; r < DL; r++) {
            int e = r * WNT + tid, col = e % IW, o = e / IW % TCO, row = e / (IW * TCO);
            if (e < DEL) Ds[(row * IW + col) * OP + o] = rd[r];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (s + 1 < s_end) DWT_LOAD(s + 1)
        for (int r = 0; r < SR; r++) {
            __local const T* xa = Xs + ((r + kh) * XCOLS + kw + pg) * CP + cw;
            __local const T* da = Ds + (r * IW + pg) * OP + tx * 4;
            for (int c = pg; c < IW; c += PG, xa += PG * CP, da += PG * OP) {  // this group's columns of row r
                T a[WI], d[WO];
#pragma unroll
                for (int i = 0; i < WI; i += 4) {
                    T4 v = *(__local const T4*)(xa + i);
                    a[i] = v.s0; a[i + 1] = v.s1; a[i + 2] = v.s2; a[i + 3] = v.s3;
                }
#pragma unroll
                for (int j = 0; j < WO; j += 4) {  // runs of 4 output channels, 4 WTX apart: DWT_CO
                    T4 v = *(__local const T4*)(da + j * WTX);
                    d[j] = v.s0; d[j + 1] = v.s1; d[j + 2] = v.s2; d[j + 3] = v.s3;
                }
#pragma unroll
                for (int i = 0; i < WI; i++)
#pragma unroll
                    for (int j = 0; j < WO; j++) acc[i][j] += a[i] * d[j];
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    // The PG groups' sums, added up by group 0 in order (local memory reused: the last barrier above ends the stages).
    const int slot = ty * WTX + tx;
    for (int g = 1; g < PG; g++) {
        if (pg == g)
            for (int i = 0; i < WI; i++) for (int j = 0; j < WO; j++) L[(i * WO + j) * (WTX * WTY) + slot] = acc[i][j];
        barrier(CLK_LOCAL_MEM_FENCE);
        if (pg == 0)
            for (int i = 0; i < WI; i++) for (int j = 0; j < WO; j++) acc[i][j] += L[(i * WO + j) * (WTX * WTY) + slot];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const int M = 9 * CIN;
    __global T* part = get_num_groups(2) == 1 ? dw : out + z * M * N;
    if (pg == 0)
        for (int i = 0; i < WI; i++) {
            int ci = ci0 + cw + i;
            for (int j = 0; j < WO; j++) {
                int co = co0 + DWT_CO(j);
                if (ci < CIN && co < N) part[(tap * CIN + ci) * N + co] = acc[i][j];
            }
        }
    if (get_num_groups(2) > 1) {  // the last work-group of the tile adds the layers up (gemm.cl's GEMM_SPLIT_FINISH)
        barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
        const int tile = get_group_id(1) * get_num_groups(0) + get_group_id(0), layers = get_num_groups(2);
        if (tid == 0) {
            DEVICE_FENCE();
            last_ = atomic_inc(done + tile) == layers - 1;
            DEVICE_FENCE();
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (last_) {
            volatile __global const T* p = out;
            for (int e = tid; e < 9 * TCI * TCO; e += WNT) {  // output channel fastest: coalesced
                int co = co0 + e % TCO, ci = ci0 + e / TCO % TCI, t = e / (TCO * TCI), at = (t * CIN + ci) * N + co;
                bool ok = ci < CIN && co < N;
                T sum = 0;
                for (int l0 = 0; l0 < layers; l0 += DWT_BATCH) {  // loads in flight, then added in order
                    T v[DWT_BATCH];
                    for (int u = 0; u < DWT_BATCH; u++) v[u] = ok && l0 + u < layers ? p[(l0 + u) * M * N + at] : (T)0;
                    for (int u = 0; u < DWT_BATCH; u++) sum += v[u];
                }
                if (ok) dw[at] = sum;
            }
            if (tid == 0) done[tile] = 0;
        }
    }
}
#endif

// -- DepthwiseConv2dNative and its backprops ------------------------------------------------------------------
// Tensors are read through (n, c, h, w) element strides (NCHW or NHWC); geo = (H, W, OH, OW, kh, kw, sh, sw),
// pad = (ph, pw); the filter is (kh, kw, C, M) and output channel k = c * M + m.
#define DW_AT(st, n, c, h, w) ((n) * (st).s0 + (c) * (st).s1 + (h) * (st).s2 + (w) * (st).s3)

#if WANT_depthwise
__kernel void K(depthwise)(GLOBAL(T, y), GLOBAL(const T, x), GLOBAL(const T, f), int total, int C, int M,
                           int8 geo, int2 pad, int4 xs, int4 ys) {
    SHIFT(y); SHIFT(x); SHIFT(f);
    int i = get_global_id(0);
    if (i >= total) return;
    int ow = i % geo.s3, oh = (i / geo.s3) % geo.s2, k = (i / (geo.s3 * geo.s2)) % (C * M);
    int n = i / (geo.s3 * geo.s2 * C * M), c = k / M, m = k % M;
    T acc = 0;
    for (int a = 0; a < geo.s4; a++) {
        int ih = oh * geo.s6 - pad.s0 + a;
        if (ih < 0 || ih >= geo.s0) continue;
        for (int b = 0; b < geo.s5; b++) {
            int iw = ow * geo.s7 - pad.s1 + b;
            if (iw < 0 || iw >= geo.s1) continue;
            acc += x[DW_AT(xs, n, c, ih, iw)] * f[((a * geo.s5 + b) * C + c) * M + m];
        }
    }
    y[DW_AT(ys, n, k, oh, ow)] = acc;
}
#endif

// dx[n, c, ih, iw] = sum over the taps (a, b) and outputs (oh, ow) that read it, and over m. The filter's size
// and the strides are compile-time constants (-DKH, -DKW, -DSH, -DSW): the taps unroll, and the divisions by the
// strides become shifts or nothing (runtime divisions cost this kernel 2.7x the forward's time on an H200).
#if WANT_depthwise_backprop_input
__kernel void K(depthwise_backprop_input)(GLOBAL(T, dx), GLOBAL(const T, dy), GLOBAL(const T, f), int total,
                                          int C, int M, int8 geo, int2 pad, int4 xs, int4 ys) {
    SHIFT(dx); SHIFT(dy); SHIFT(f);
    int i = get_global_id(0);
    if (i >= total) return;
    int iw = i % geo.s1, ih = (i / geo.s1) % geo.s0, c = (i / (geo.s1 * geo.s0)) % C;
    int n = i / (geo.s1 * geo.s0 * C);
    T acc = 0;
    for (int a = 0; a < KH; a++) {
        int th = ih + pad.s0 - a;
        if (th < 0 || th % SH != 0 || th / SH >= geo.s2) continue;
        for (int b = 0; b < KW; b++) {
            int tw = iw + pad.s1 - b;
            if (tw < 0 || tw % SW != 0 || tw / SW >= geo.s3) continue;
            for (int m = 0; m < M; m++)
                acc += dy[DW_AT(ys, n, c * M + m, th / SH, tw / SW)] * f[((a * KW + b) * C + c) * M + m];
        }
    }
    dx[DW_AT(xs, n, c, ih, iw)] = acc;
}
#endif

// df[a, b, c, m] = sum over p = (n, oh, ow) of x[n, c, oh*sh - ph + a, ow*sw - pw + b] * dy[n, c*M + m, oh, ow]:
// all KH * KW taps of an output channel k = c*M + m at once (built with -DKH, -DKW), so that each dy element is
// read once and its x neighbourhood from cache (one group per filter element read them KH * KW times). Group
// (j, k) takes positions [j * chunk, (j + 1) * chunk), each of its DL items every DL-th of them, then sums its
// items' per-tap totals in a tree: part[j, tap, k] (df itself when one chunk). With `finish`, the last group of
// channel k (counted in done[k], a zeroed table, set back to 0) adds the chunks up into df in chunk order, with
// fused.cl's CHANNEL_FINISH's device-wide fences; else the launcher does in a second pass. Every sum runs in a
// fixed order: deterministic.
#if WANT_depthwise_backprop_filter_taps
__kernel __attribute__((reqd_work_group_size(DL, 1, 1)))
void K(depthwise_backprop_filter_taps)(GLOBAL(T, part), GLOBAL(const T, x), GLOBAL(const T, dy), GLOBAL(T, df),
                                       GLOBAL(int, done), int positions, int chunk, int C, int M, int8 geo,
                                       int2 pad, int4 xs, int4 ys, int finish) {
    SHIFT(part); SHIFT(x); SHIFT(dy); SHIFT(df); SHIFT(done);
    __local T sh[DL];
    __local int last_;
    int lid = get_local_id(0), j = get_group_id(0), k = get_group_id(1), CM = C * M;
    int c = k / M;
    T acc[KH * KW];
    for (int t = 0; t < KH * KW; t++) acc[t] = 0;
    int end = min(positions, (j + 1) * chunk);
    for (int p = j * chunk + lid; p < end; p += DL) {
        int ow = p % geo.s3, oh = (p / geo.s3) % geo.s2, n = p / (geo.s3 * geo.s2);
        T g = dy[DW_AT(ys, n, k, oh, ow)];
        int ih0 = oh * geo.s6 - pad.s0, iw0 = ow * geo.s7 - pad.s1;
        for (int a = 0; a < KH; a++) {
            int ih = ih0 + a;
            for (int b = 0; b < KW; b++) {
                int iw = iw0 + b;
                if (ih >= 0 && ih < geo.s0 && iw >= 0 && iw < geo.s1)
                    acc[a * KW + b] += x[DW_AT(xs, n, c, ih, iw)] * g;
            }
        }
    }
    for (int t = 0; t < KH * KW; t++) {
        sh[lid] = acc[t];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int s = DL / 2; s > 0; s >>= 1) {
            if (lid < s) sh[lid] += sh[lid + s];
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (lid == 0) part[(j * KH * KW + t) * CM + k] = sh[0];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (finish) {
        barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
        if (lid == 0) {
            DEVICE_FENCE();
            last_ = atomic_inc(done + k) == get_num_groups(0) - 1;
            DEVICE_FENCE();
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (last_) {
            if (lid < KH * KW) {
                volatile __global const T* p = part;  // past the caches: other groups wrote them
                T s = 0;
                for (int q = 0; q < get_num_groups(0); q++) s += p[(q * KH * KW + lid) * CM + k];
                df[lid * CM + k] = s;
            }
            if (lid == 0) done[k] = 0;
        }
    }
}
#endif

// The same, one work-group of DL items per filter element (filters larger than conv.py's _TAPS_MAX taps).
#if WANT_depthwise_backprop_filter
__kernel __attribute__((reqd_work_group_size(DL, 1, 1)))
void K(depthwise_backprop_filter)(GLOBAL(T, df), GLOBAL(const T, x), GLOBAL(const T, dy), int total, int N,
                                  int C, int M, int8 geo, int2 pad, int4 xs, int4 ys) {
    SHIFT(df); SHIFT(x); SHIFT(dy);
    __local T sh[DL];
    int i = get_group_id(0), lid = get_local_id(0);
    int m = i % M, c = (i / M) % C, b = (i / (M * C)) % geo.s5, a = i / (M * C * geo.s5);
    T acc = 0;
    for (int p = lid; p < N * geo.s2 * geo.s3; p += DL) {
        int ow = p % geo.s3, oh = (p / geo.s3) % geo.s2, n = p / (geo.s3 * geo.s2);
        int ih = oh * geo.s6 - pad.s0 + a, iw = ow * geo.s7 - pad.s1 + b;
        if (ih >= 0 && ih < geo.s0 && iw >= 0 && iw < geo.s1)
            acc += x[DW_AT(xs, n, c, ih, iw)] * dy[DW_AT(ys, n, c * M + m, oh, ow)];
    }
    sh[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = DL / 2; s > 0; s >>= 1) {
        if (lid < s) sh[lid] += sh[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0 && i < total) df[i] = sh[0];
}
#endif
