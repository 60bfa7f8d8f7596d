"""tf.train.replica_device_setter (TF1): the device function of between-graph replication, which puts variables
on the parameter-server tasks in turn and every other op on the worker. tfplus runs one process: the strings
it assigns are the graph's (its GraphDef, op.device), and a local Session refuses ops on other jobs as
TensorFlow's does.

    with tf.device(tf.train.replica_device_setter(ps_tasks=2)):
        w = tf.Variable(...)        # w.device == '/job:ps/task:0'
"""
from __future__ import annotations

from tfplus.device_spec import DeviceSpec

__all__ = ["replica_device_setter"]

# TF1's STANDARD_PS_OPS: the ops that hold state.
_PS_OPS = ("Variable", "VariableV2", "AutoReloadVariable", "MutableHashTable", "MutableHashTableV2",
           "MutableHashTableOfTensors", "MutableHashTableOfTensorsV2", "MutableDenseHashTable",
           "MutableDenseHashTableV2", "VarHandleOp", "BoostedTreesEnsembleResourceHandleOp")


def replica_device_setter(ps_tasks: int = 0, ps_device: str = "/job:ps", worker_device: str = "/job:worker",
                          merge_devices: bool = True, cluster=None, ps_ops=None, ps_strategy=None):
    """A device function for tf.device: ps_ops' ops (variables) go to `ps_device` task by task (round robin, or
    ps_strategy(op)), the rest to `worker_device`; each keeps the fields its own tf.device set. `cluster` (a
    dict {job: [addresses]}) gives the number of ps tasks. None when there are no ps tasks (TF1's)."""
    if cluster is not None:
        jobs = cluster.as_dict() if hasattr(cluster, "as_dict") else dict(cluster)
        ps_tasks = len(jobs.get(DeviceSpec.from_string(ps_device).job or "ps", []))
    if ps_tasks == 0:
        return None
    if not merge_devices:
        raise ValueError("replica_device_setter: merge_devices=False is not supported (as in TF1)")
    ps_ops = tuple(ps_ops or _PS_OPS)
    turn = [0]

    def round_robin(op) -> int:
        task, turn[0] = turn[0], (turn[0] + 1) % ps_tasks
        return task
    strategy = ps_strategy or round_robin
    ps_spec, worker_spec = DeviceSpec.from_string(ps_device), DeviceSpec.from_string(worker_device or "")

    def device_function(op) -> str:
        current = DeviceSpec.from_string(op.device or "")
        if op.type in ps_ops:
            spec = ps_spec
            if spec.job and current.job in (None, spec.job):
                spec = spec.replace(task=strategy(op))
            return spec.make_merged_spec(current).to_string()
        return worker_spec.make_merged_spec(current).to_string()
    return device_function
