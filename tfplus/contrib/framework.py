"""tf.contrib.framework (TF1): the global-step helpers that older scripts take from here rather than tf.train.

    import tfplus as tf
    step = tf.contrib.framework.get_or_create_global_step()
"""
from tfplus.train import get_global_step, get_or_create_global_step
from tfplus.unsupported import module_getattr

__all__ = ["get_global_step", "get_or_create_global_step"]
__getattr__ = module_getattr(__name__, "tf.contrib.framework")
