"""tf.train: optimizers, the global step, learning-rate schedules and checkpoints (TF1 names, signatures)."""
from tfplus.graph_io import write_graph
from tfplus.train import saver as _saver
from tfplus.train.learning_rate_decay import (
    cosine_decay,
    cosine_decay_restarts,
    exponential_decay,
    inverse_time_decay,
    linear_cosine_decay,
    natural_exp_decay,
    noisy_linear_cosine_decay,
    piecewise_constant,
    piecewise_constant_decay,
    polynomial_decay,
)
from tfplus.train.meta_graph import export_meta_graph, import_meta_graph
from tfplus.train.optimizer import (
    AdadeltaOptimizer,
    AdagradOptimizer,
    AdamOptimizer,
    FtrlOptimizer,
    GradientDescentOptimizer,
    MomentumOptimizer,
    Optimizer,
    ProximalAdagradOptimizer,
    ProximalGradientDescentOptimizer,
    RMSPropOptimizer,
)
from tfplus.train.saver import Saver, latest_checkpoint
from tfplus.train.training_util import (
    assert_global_step,
    create_global_step,
    get_global_step,
    get_or_create_global_step,
    global_step,
)
from tfplus.train.warm_start import init_from_checkpoint, warm_start

__all__ = ["Optimizer", "GradientDescentOptimizer", "MomentumOptimizer", "AdamOptimizer", "RMSPropOptimizer",
           "AdagradOptimizer", "AdadeltaOptimizer", "FtrlOptimizer", "ProximalAdagradOptimizer",
           "ProximalGradientDescentOptimizer",
           "assert_global_step", "create_global_step", "get_global_step", "get_or_create_global_step",
           "global_step",
           "exponential_decay", "natural_exp_decay", "inverse_time_decay", "polynomial_decay", "cosine_decay",
           "linear_cosine_decay", "noisy_linear_cosine_decay",
           "cosine_decay_restarts", "piecewise_constant", "piecewise_constant_decay", "Saver", "latest_checkpoint",
           "export_meta_graph", "import_meta_graph", "write_graph", "init_from_checkpoint", "warm_start"]

# The rest of the checkpoint API (get_checkpoint_state, list_variables, ...): whatever saver.py lists.
for _name in _saver.__all__:
    globals()[_name] = getattr(_saver, _name)
    if _name not in __all__:
        __all__.append(_name)

# TF1's training helpers: moving averages, the monitored session and its hooks; missing names raise clearly.
from tfplus.train import monitored_session as _monitored  # noqa: E402
from tfplus.train.moving_averages import ExponentialMovingAverage  # noqa: E402,F401
from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402

__all__.append("ExponentialMovingAverage")
for _name in _monitored.__all__:
    globals()[_name] = getattr(_monitored, _name)
    __all__.append(_name)
__getattr__ = _module_getattr(__name__, "tf.train")

# TF1 scaffolding (tf1infra): device functions.
from tfplus.train.device_setter import replica_device_setter  # noqa: E402,F401
from tfplus.train.supervisor import Supervisor  # noqa: E402,F401

__all__ += ["replica_device_setter", "Supervisor"]
