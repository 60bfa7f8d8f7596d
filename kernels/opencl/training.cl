// Optimizer updates (TF's training_ops), in place on the variable and its slots. Hyperparameters are device
// scalars (a learning-rate schedule computes lr on the device), read once per work-item.

// var -= alpha * delta
#if WANT_apply_gradient_descent
__kernel void K(apply_gradient_descent)(GLOBAL(T, var), GLOBAL(const T, alpha), GLOBAL(const T, delta), int n) {
    SHIFT(var); SHIFT(alpha); SHIFT(delta);
    int i = get_global_id(0);
    if (i < n) var[i] -= alpha[0] * delta[i];
}
#endif

// accum = accum * momentum + grad; var -= lr * accum (nesterov: var -= lr * grad + lr * momentum * accum)
#if WANT_apply_momentum
__kernel void K(apply_momentum)(GLOBAL(T, var), GLOBAL(T, accum), GLOBAL(const T, lr), GLOBAL(const T, grad),
                                GLOBAL(const T, momentum), int n, int nesterov) {
    SHIFT(var); SHIFT(accum); SHIFT(lr); SHIFT(grad); SHIFT(momentum);
    int i = get_global_id(0);
    if (i >= n) return;
    T m = momentum[0], g = grad[i];
    T a = accum[i] * m + g;
    accum[i] = a;
    var[i] -= nesterov ? lr[0] * (g + m * a) : lr[0] * a;
}
#endif

// lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t); m += (g - m) (1 - beta1); v += (g^2 - v) (1 - beta2);
// var -= lr_t * m / (sqrt(v) + epsilon)   (nesterov: lr_t * (m + (1 - beta1) (g - m)) / (sqrt(v) + epsilon))
#if WANT_apply_adam
__kernel void K(apply_adam)(GLOBAL(T, var), GLOBAL(T, m), GLOBAL(T, v), GLOBAL(const T, beta1_power),
                            GLOBAL(const T, beta2_power), GLOBAL(const T, lr), GLOBAL(const T, beta1),
                            GLOBAL(const T, beta2), GLOBAL(const T, epsilon), GLOBAL(const T, grad), int n,
                            int nesterov) {
    SHIFT(var); SHIFT(m); SHIFT(v); SHIFT(beta1_power); SHIFT(beta2_power); SHIFT(lr); SHIFT(beta1);
    SHIFT(beta2); SHIFT(epsilon); SHIFT(grad);
    int i = get_global_id(0);
    if (i >= n) return;
    T one = 1, b1 = beta1[0], g = grad[i];
    T alpha = lr[0] * sqrt(one - beta2_power[0]) / (one - beta1_power[0]);
    T mi = m[i] + (g - m[i]) * (one - b1);
    T vi = v[i] + (g * g - v[i]) * (one - beta2[0]);
    m[i] = mi;
    v[i] = vi;
    T num = nesterov ? mi + (one - b1) * (g - mi) : mi;
    var[i] -= alpha * (num / (sqrt(vi) + epsilon[0]));
}
#endif

// ms += (g^2 - ms) (1 - rho); mom = momentum * mom + lr * g / sqrt(ms + epsilon); var -= mom
#if WANT_apply_rms_prop
__kernel void K(apply_rms_prop)(GLOBAL(T, var), GLOBAL(T, ms), GLOBAL(T, mom), GLOBAL(const T, lr),
                                GLOBAL(const T, rho), GLOBAL(const T, momentum), GLOBAL(const T, epsilon),
                                GLOBAL(const T, grad), int n) {
    SHIFT(var); SHIFT(ms); SHIFT(mom); SHIFT(lr); SHIFT(rho); SHIFT(momentum); SHIFT(epsilon); SHIFT(grad);
    int i = get_global_id(0);
    if (i >= n) return;
    T one = 1, g = grad[i];
    T s = ms[i] + (g * g - ms[i]) * (one - rho[0]);
    T m = mom[i] * momentum[0] + lr[0] * (g / sqrt(s + epsilon[0]));
    ms[i] = s;
    mom[i] = m;
    var[i] -= m;
}
#endif

// ms += (g^2 - ms) (1 - rho); mg += (g - mg) (1 - rho); mom = momentum * mom + lr * g / sqrt(ms - mg^2 + eps);
// var -= mom
#if WANT_apply_centered_rms_prop
__kernel void K(apply_centered_rms_prop)(GLOBAL(T, var), GLOBAL(T, mg), GLOBAL(T, ms), GLOBAL(T, mom),
                                         GLOBAL(const T, lr), GLOBAL(const T, rho), GLOBAL(const T, momentum),
                                         GLOBAL(const T, epsilon), GLOBAL(const T, grad), int n) {
    SHIFT(var); SHIFT(mg); SHIFT(ms); SHIFT(mom); SHIFT(lr); SHIFT(rho); SHIFT(momentum); SHIFT(epsilon); SHIFT(grad);
    int i = get_global_id(0);
    if (i >= n) return;
    T one = 1, r = one - rho[0], g = grad[i];
    T s = ms[i] + (g * g - ms[i]) * r;
    T a = mg[i] + (g - mg[i]) * r;
    T m = mom[i] * momentum[0] + lr[0] * (g / sqrt(s - a * a + epsilon[0]));
    ms[i] = s;
    mg[i] = a;
    mom[i] = m;
    var[i] -= m;
}
#endif

// accum += g^2 (when update_slots); var -= lr * g / sqrt(accum)
#if WANT_apply_adagrad
__kernel void K(apply_adagrad)(GLOBAL(T, var), GLOBAL(T, accum), GLOBAL(const T, lr), GLOBAL(const T, grad),
                               int n, int update_slots) {
    SHIFT(var); SHIFT(accum); SHIFT(lr); SHIFT(grad);
    int i = get_global_id(0);
    if (i >= n) return;
    T g = grad[i];
    T a = update_slots ? accum[i] + g * g : accum[i];
    accum[i] = a;
    var[i] -= lr[0] * (g / sqrt(a));
}
#endif

// accum = rho accum + (1 - rho) g^2; u = sqrt(accum_update + eps) / sqrt(accum + eps) * g; var -= lr * u;
// accum_update = rho accum_update + (1 - rho) u^2
#if WANT_apply_adadelta
__kernel void K(apply_adadelta)(GLOBAL(T, var), GLOBAL(T, accum), GLOBAL(T, accum_update), GLOBAL(const T, lr),
                                GLOBAL(const T, rho), GLOBAL(const T, epsilon), GLOBAL(const T, grad), int n) {
    SHIFT(var); SHIFT(accum); SHIFT(accum_update); SHIFT(lr); SHIFT(rho); SHIFT(epsilon); SHIFT(grad);
    int i = get_global_id(0);
    if (i >= n) return;
    T one = 1, r = rho[0], eps = epsilon[0], g = grad[i];
    T a = accum[i] * r + g * g * (one - r);
    T u = sqrt(accum_update[i] + eps) / sqrt(a + eps) * g;
    accum[i] = a;
    var[i] -= u * lr[0];
    accum_update[i] = accum_update[i] * r + u * u * (one - r);
}
#endif
