// Elementwise ops. y[i] = f(x[i]); z[i] = f(x[ix], y[iy]) with NumPy broadcasting: the _bc variants find
// ix, iy with strided_offset() (zero strides on broadcast dims), the plain ones read index i of both.

#define UNARY(NAME, TO, EXPR) \
__kernel void PASTE(NAME##_, SFX)(GLOBAL(TO, out), GLOBAL(const T, in), int n) { \
    SHIFT(out); SHIFT(in); \
    int i = get_global_id(0); \
    if (i < n) { T x = in[i]; out[i] = (EXPR); } \
}

// Both variants: NAME (same shapes) and NAME_bc (broadcasting).
#define BINARY(NAME, TO, EXPR) \
__kernel void PASTE(NAME##_, SFX)(GLOBAL(TO, out), GLOBAL(const T, xs), GLOBAL(const T, ys), int n) { \
    SHIFT(out); SHIFT(xs); SHIFT(ys); \
    int i = get_global_id(0); \
    if (i < n) { T x = xs[i], y = ys[i]; out[i] = (EXPR); } \
} \
__kernel void PASTE(NAME##_bc_, SFX)(GLOBAL(TO, out), GLOBAL(const T, xs), GLOBAL(const T, ys), int n, \
                                     int rank, int8 shape, int8 sx, int8 sy) { \
    SHIFT(out); SHIFT(xs); SHIFT(ys); \
    int i = get_global_id(0); \
    if (i < n) { \
        T x = xs[strided_offset(i, rank, shape, sx)], y = ys[strided_offset(i, rank, shape, sy)]; \
        out[i] = (EXPR); \
    } \
}

// -- arithmetic (every numeric type) ------------------------------------------------------------------------------
#if WANT_add
BINARY(add, T, x + y)
#endif
#if WANT_sub
BINARY(sub, T, x - y)
#endif
#if WANT_mul
BINARY(mul, T, x * y)
#endif
#if WANT_squared_difference
BINARY(squared_difference, T, (x - y) * (x - y))
#endif
#if WANT_neg
UNARY(neg, T, -x)
#endif
#if WANT_square
UNARY(square, T, x * x)
#endif

// -- comparisons (bool results) -----------------------------------------------------------------------------------
#if WANT_equal
BINARY(equal, bool_t, x == y)
#endif
#if WANT_not_equal
BINARY(not_equal, bool_t, x != y)
#endif
#if WANT_less
BINARY(less, bool_t, x < y)
#endif
#if WANT_less_equal
BINARY(less_equal, bool_t, x <= y)
#endif
#if WANT_greater
BINARY(greater, bool_t, x > y)
#endif
#if WANT_greater_equal
BINARY(greater_equal, bool_t, x >= y)
#endif

#if IS_FLOAT
// NaN propagates through max/min as in NumPy (fmax would drop it).
#if WANT_maximum
BINARY(maximum, T, (x > y || isnan(x)) ? x : y)
#endif
#if WANT_minimum
BINARY(minimum, T, (x < y || isnan(x)) ? x : y)
#endif
#if WANT_real_div
BINARY(real_div, T, x / y)
#endif
#if WANT_pow
BINARY(pow, T, pow(x, y))
#endif
// NumPy's floor_divide / remainder for floats (npy_divmod): the quotient from fmod, then floored.
inline T floor_div_f(T a, T b) {
    T mod = fmod(a, b);
    if (b == 0) return a / b;
    T div = (a - mod) / b;
    if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1;
    if (div == 0) return copysign((T)0, a / b);
    T fl = floor(div);
    return (div - fl > (T)0.5) ? fl + 1 : fl;
}
inline T floor_mod_f(T a, T b) {
    T mod = fmod(a, b);
    if (b == 0) return mod;
    if (mod != 0) { if ((b < 0) != (mod < 0)) mod += b; }
    else mod = copysign((T)0, b);
    return mod;
}
#if WANT_floor_div
BINARY(floor_div, T, floor_div_f(x, y))
#endif
#if WANT_floor_mod
BINARY(floor_mod, T, floor_mod_f(x, y))
#endif
#if WANT_abs
UNARY(abs, T, fabs(x))
#endif
#if WANT_sign
UNARY(sign, T, x > 0 ? (T)1 : (x < 0 ? (T)-1 : x))
#endif
#if WANT_exp
UNARY(exp, T, exp(x))
#endif
#if WANT_log
UNARY(log, T, log(x))
#endif
#if WANT_log1p
UNARY(log1p, T, log1p(x))
#endif
#if WANT_sqrt
UNARY(sqrt, T, sqrt(x))
#endif
#if WANT_rsqrt
UNARY(rsqrt, T, (T)1 / sqrt(x))
#endif
#if WANT_reciprocal
UNARY(reciprocal, T, (T)1 / x)
#endif
#if WANT_sin
UNARY(sin, T, sin(x))
#endif
#if WANT_cos
UNARY(cos, T, cos(x))
#endif
#if WANT_erf
UNARY(erf, T, erf(x))
#endif
#if WANT_floor
UNARY(floor, T, floor(x))
#endif
#if WANT_ceil
UNARY(ceil, T, ceil(x))
#endif
#if WANT_round
UNARY(round, T, rint(x))  // halves to even, as NumPy
#endif
// -- activations and their gradients (nn ops) --
#if WANT_relu
UNARY(relu, T, x < 0 ? (T)0 : x)
#endif
#if WANT_relu6
UNARY(relu6, T, x < 0 ? (T)0 : (x > 6 ? (T)6 : x))
#endif
#if WANT_sigmoid
UNARY(sigmoid, T, (T)1 / ((T)1 + exp(-x)))
#endif
#if WANT_tanh
UNARY(tanh, T, tanh(x))
#endif
#if WANT_elu
UNARY(elu, T, x > 0 ? x : expm1(x))
#endif
#if WANT_softplus
UNARY(softplus, T, fmax(x, (T)0) + log1p(exp(-fabs(x))))
#endif
#if WANT_relu_grad
BINARY(relu_grad, T, y > 0 ? x : (T)0)                      // x: gradients, y: features
#endif
#if WANT_relu6_grad
BINARY(relu6_grad, T, (y > 0 && y < 6) ? x : (T)0)
#endif
#if WANT_sigmoid_grad
BINARY(sigmoid_grad, T, y * x * ((T)1 - x))                 // x: y = sigmoid, y: dy
#endif
#if WANT_tanh_grad
BINARY(tanh_grad, T, y * ((T)1 - x * x))                    // x: y = tanh, y: dy
#endif
#if WANT_elu_grad
BINARY(elu_grad, T, y > 0 ? x : x * (y + (T)1))             // x: gradients, y: outputs
#endif
#if WANT_softplus_grad
BINARY(softplus_grad, T, x / ((T)1 + exp(-y)))              // x: gradients, y: features
#endif
#if WANT_rsqrt_grad
BINARY(rsqrt_grad, T, (T)(-0.5) * y * x * x * x)            // x: y = rsqrt, y: dy
#endif
#if WANT_sqrt_grad
BINARY(sqrt_grad, T, (T)0.5 * y / x)                        // x: y = sqrt, y: dy
#endif
#if WANT_reciprocal_grad
BINARY(reciprocal_grad, T, -y * x * x)                      // x: y = 1/x, y: dy
#endif
#if WANT_div_no_nan
BINARY(div_no_nan, T, y == (T)0 ? (T)0 : x / y)
#endif
#else
#if WANT_maximum
BINARY(maximum, T, x > y ? x : y)
#endif
#if WANT_minimum
BINARY(minimum, T, x < y ? x : y)
#endif
// Integer division rounds toward -inf; division by zero gives 0, as NumPy.
#if WANT_floor_div
BINARY(floor_div, T, y == 0 ? (T)0 : (x / y - (((x % y) != 0 && ((x < 0) != (y < 0))) ? 1 : 0)))
#endif
#if WANT_floor_mod
BINARY(floor_mod, T, y == 0 ? (T)0 : ((x % y) + ((((x % y) != 0) && (((x % y) < 0) != (y < 0))) ? y : 0)))
#endif
inline T ipow(T x, T y) {
    T r = 1;
    if (y < 0) return x == 1 ? 1 : (x == -1 ? ((y & 1) ? -1 : 1) : 0);
    while (y > 0) { if (y & 1) r *= x; x *= x; y >>= 1; }
    return r;
}
#if WANT_pow
BINARY(pow, T, ipow(x, y))
#endif
#if IS_SIGNED
#if WANT_abs
UNARY(abs, T, x < 0 ? -x : x)
#endif
#if WANT_sign
UNARY(sign, T, x > 0 ? (T)1 : (x < 0 ? (T)-1 : (T)0))
#endif
#else
#if WANT_abs
UNARY(abs, T, x)
#endif
#if WANT_sign
UNARY(sign, T, x > 0 ? (T)1 : (T)0)
#endif
#endif
#if WANT_round
UNARY(round, T, x)
#endif
#if WANT_logical_not
UNARY(logical_not, T, !x)
#endif
#if WANT_logical_and
BINARY(logical_and, T, x && y)
#endif
#if WANT_logical_or
BINARY(logical_or, T, x || y)
#endif
#endif

// -- Cast: built for the source type T; one kernel per destination type -----------------------------------------
#define CAST(DSFX, DT) UNARY(cast_##DSFX, DT, (DT)x)
#if WANT_cast_f32
CAST(f32, float)
#endif
#if WANT_cast_i32
CAST(i32, int)
#endif
#if WANT_cast_i64
CAST(i64, long)
#endif
#if WANT_cast_u8
CAST(u8, uchar)
#endif
#if WANT_cast_i8
CAST(i8, char)
#endif
#if WANT_cast_i16
CAST(i16, short)
#endif
#if WANT_cast_b8
UNARY(cast_b8, uchar, x != 0)
#endif
#ifdef cl_khr_fp64
#if WANT_cast_f64
CAST(f64, double)
#endif
#endif

// -- Select: out = cond ? t : e, each operand broadcast to out's shape ------------------------------------------
#if WANT_select
__kernel void K(select)(GLOBAL(T, out), GLOBAL(const bool_t, c), GLOBAL(const T, t), GLOBAL(const T, e),
                        int n, int rank, int8 shape, int8 sc, int8 st, int8 se) {
    SHIFT(out); SHIFT(c); SHIFT(t); SHIFT(e);
    int i = get_global_id(0);
    if (i < n) {
        out[i] = c[strided_offset(i, rank, shape, sc)] ? t[strided_offset(i, rank, shape, st)]
                                                       : e[strided_offset(i, rank, shape, se)];
    }
}
#endif

// -- AddN: out = a + b (+ c + d), same shapes ------------------------------------------------------------------------
#if WANT_add4
__kernel void K(add4)(GLOBAL(T, out), GLOBAL(const T, a), GLOBAL(const T, b), GLOBAL(const T, c),
                      GLOBAL(const T, d), int n, int terms) {
    SHIFT(out); SHIFT(a); SHIFT(b); SHIFT(c); SHIFT(d);
    int i = get_global_id(0);
    if (i < n) {
        T s = a[i] + b[i];
        if (terms > 2) s += c[i];
        if (terms > 3) s += d[i];
        out[i] = s;
    }
}
#endif

// -- Fill: out[i] = value[0] (a device scalar) or a constant --------------------------------------------------------
#if WANT_fill
__kernel void K(fill)(GLOBAL(T, out), GLOBAL(const T, value), int n) {
    SHIFT(out); SHIFT(value);
    int i = get_global_id(0);
    if (i < n) out[i] = value[0];
}
#endif
#if WANT_fill_const
__kernel void K(fill_const)(GLOBAL(T, out), T value, int n) {
    SHIFT(out);
    int i = get_global_id(0);
    if (i < n) out[i] = value;
}
#endif

// -- Scale: out[i] *= factor (a constant) -----------------------------------------------------------------------------
#if WANT_scale_const
__kernel void K(scale_const)(GLOBAL(T, out), T factor, int n) {
    SHIFT(out);
    int i = get_global_id(0);
    if (i < n) out[i] *= factor;
}
#endif

// -- Range: out[i] = start + i * delta (device scalars) ---------------------------------------------------------------
#if WANT_range
__kernel void K(range)(GLOBAL(T, out), GLOBAL(const T, start), GLOBAL(const T, delta), int n) {
    SHIFT(out); SHIFT(start); SHIFT(delta);
    int i = get_global_id(0);
    if (i < n) out[i] = start[0] + (T)i * delta[0];
}
#endif
