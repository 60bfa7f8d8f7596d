// MatMul: C (M x N, row stride ldc) = A (M x K) B (K x N), A and B read through strides, so transposes are free.
// Split K: work-group layer z sums k in [z * chunk, (z + 1) * chunk) into its own C (C + z * M * ldc); the
// caller adds the layers up (small outputs with long sums would otherwise leave most of the device idle), or with
// `finish` the last layer of each tile does, into `out` (gemm.cl's GEMM_SPLIT_FINISH).
// `act` (_FusedMatMul; float builds): 0 writes the product, 1 adds bias[n], 2 then applies Relu, 3 Relu6, as the
// product is written: by the only layer, or by the finishing one (the split layers themselves write plain sums).
// A uniform branch, not a build define, so that the fused op shares MatMul's programs (each builds ~90 ms slower
// on the H100 for it, less than a program of its own). The same arithmetic as fused.cl's fused_bias_relu and
// nn.cl's bias_add over the product.
#if WANT_matmul
#if IS_FLOAT
inline T matmul_epilogue(T v, int act, __global const T* bias, int n) {
    if (act) {
        v += bias[n];
        if (act == 2) v = fmax(v, (T)0);
        if (act == 3) v = clamp(v, (T)0, (T)6);
    }
    return v;
}
#define GEMM_EPI(v, n) matmul_epilogue(v, act, bias, n)
#else
#define GEMM_EPI(v, n) (v)
#endif
__kernel GEMM_ATTR void K(matmul)(GLOBAL(T, C), GLOBAL(const T, A), GLOBAL(const T, B), GLOBAL(T, out),
                                  GLOBAL(int, done), GLOBAL(const T, bias), int M, int N, int Kd, int sam,
                                  int sak, int sbk, int sbn, int ldc, int chunk, int finish, int act) {
    SHIFT(C); SHIFT(A); SHIFT(B); SHIFT(out); SHIFT(done); SHIFT(bias);
    __local int last_;  // GEMM_SPLIT_FINISH's
    GEMM_BEGIN
    const int kb = get_group_id(2) * chunk, ke = min(Kd, kb + chunk);
    __global T* layers = C;
    C += get_group_id(2) * M * ldc;
    for (int k0 = kb; k0 < ke; k0 += TK) {
        for (int r = 0; r < A_LOADS; r++) {
            A_POS(r, mm, kk);
            int m = m0 + mm, k = k0 + kk;
            As[kk][mm] = (m < M && k < ke) ? A[m * sam + k * sak] : (T)0;
        }
        for (int r = 0; r < B_LOADS; r++) {
            B_POS(r, nn, kk);
            int n = n0 + nn, k = k0 + kk;
            Bs[kk][nn] = (n < N && k < ke) ? B[k * sbk + n * sbn] : (T)0;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        GEMM_TILE
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int i = 0; i < WM; i++) {
        int m = m0 + ty + i * TY;
        for (int j = 0; j < WN; j++) {
            int n = n0 + tx + j * TX;
            if (m < M && n < N) C[m * ldc + n] = get_num_groups(2) > 1 ? acc[i][j] : GEMM_EPI(acc[i][j], n);
        }
    }
#define GEMM_STORE(m, n, v) out[(m) * ldc + (n)] = GEMM_EPI(v, n)
    GEMM_SPLIT_FINISH(layers, done, M, N, ldc)
}
#endif
