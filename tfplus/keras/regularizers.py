"""tf.keras.regularizers: l1, l2, l1_l2 penalties of a weight (Keras's: l2(0.01)(w) = 0.01 * sum(w^2), not TF1's
tf.nn.l2_loss's half)."""
from __future__ import annotations

from tfplus.ops import math_ops


class Regularizer:
    def __call__(self, x):
        return 0.0


class L1L2(Regularizer):
    def __init__(self, l1=0.0, l2=0.0):
        self.l1, self.l2 = float(l1), float(l2)

    def __call__(self, x):
        terms = []
        if self.l1:
            terms.append(self.l1 * math_ops.reduce_sum(math_ops.abs(x)))
        if self.l2:
            terms.append(self.l2 * math_ops.reduce_sum(math_ops.square(x)))
        return math_ops.add_n(terms) if len(terms) > 1 else terms[0] if terms else math_ops.constant(0.0)


def l1(l=0.01):  # noqa: E741 (Keras's argument name)
    return L1L2(l1=l)


def l2(l=0.01):  # noqa: E741
    return L1L2(l2=l)


def l1_l2(l1=0.01, l2=0.01):
    return L1L2(l1, l2)


L1, L2 = l1, l2


def get(identifier):
    if identifier is None or callable(identifier):
        return identifier
    named = {"l1": l1, "l2": l2, "l1_l2": l1_l2}
    if identifier not in named:
        raise ValueError(f"tf.keras.regularizers.get: unknown regularizer {identifier!r}; known: {sorted(named)}")
    return named[identifier]()


from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr(__name__, "tf.keras.regularizers")
