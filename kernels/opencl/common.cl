// Prepended to every tfplus OpenCL program. Programs are built per dtype with -DT=<C type> -DSFX=<suffix>
// (float/f32, double/f64, int/i32, long/i64, uchar/b8 ...) and -DIS_FLOAT=0|1; kernel names carry the suffix:
// K(relu) is relu_f32 in the float build. OpenCL 1.2, no extension required (fp64 only where the device has it).
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

#define PASTE_(a, b) a##b
#define PASTE(a, b) PASTE_(a, b)
#define K(name) PASTE(name##_, SFX)

// Selective builds: a program is built with -DWANT_<name>=1 for the kernel (family member) it is for, and each
// kernel sits under `#if WANT_<name>` (an undefined name is 0 there), so a CPU compiler (PoCL: ~0.1-1 s per
// kernel) compiles that one, not the whole family. NOTE: OpenCL C 1.2 has no variadic macros, so no cleverer
// preprocessor selection; and kernel-making macros paste NAME into a prefix (exp -> exp_) before any other use:
// some compilers define builtins such as exp or max as macros, which would otherwise rename the kernel.

typedef uchar bool_t;  // NumPy's bool is one byte, 0 or 1

// Offset of element i (row-major over `shape`) in an operand with strides `st` (elements; 0 = broadcast).
// Dims are innermost first: shape.s0 is the last axis. rank <= 8 after merging.
inline int strided_offset(int i, int rank, int8 shape, int8 st) {
    int sh[8] = {shape.s0, shape.s1, shape.s2, shape.s3, shape.s4, shape.s5, shape.s6, shape.s7};
    int s[8] = {st.s0, st.s1, st.s2, st.s3, st.s4, st.s5, st.s6, st.s7};
    int off = 0;
    for (int d = 0; d < rank; d++) {
        int q = i / sh[d];
        off += (i - q * sh[d]) * s[d];
        i = q;
    }
    return off;
}
