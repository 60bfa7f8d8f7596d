"""Time import_graph_def of a large GraphDef (default ~100k nodes) in tfplus and, in the same run, in TensorFlow.

    python benchmarks/bench_import.py [--nodes 100000] [--rounds 3]

The GraphDef: a stack of tiny dense layers (variables with truncated-normal and zero initializers, MatMul,
BiasAdd, Relu) and `global_variables_initializer`, whose NoOp has a control input per variable (the fan-in that
real training graphs have). Each figure is the median over `--rounds` imports of the same parsed GraphDef into a
fresh graph, wall-clock and CPU time; parsing the bytes is timed apart. TensorFlow (tf.compat.v1.import_graph_def)
is the peer when it is installed.
"""
from __future__ import annotations

import argparse
import statistics
import time


def build(nodes: int) -> bytes:
    import tfplus as tf
    g = tf.Graph()
    with g.as_default():
        tf.set_random_seed(1)
        h = tf.placeholder(tf.float32, [None, 4], name="x")
        while len(g.get_operations()) < nodes - 1:
            w = tf.Variable(tf.truncated_normal([4, 4], stddev=0.1))
            b = tf.Variable(tf.zeros([4]))
            h = tf.nn.relu(tf.nn.bias_add(tf.matmul(h, w), b))
        tf.global_variables_initializer()
    return g.as_graph_def().SerializeToString()


def _median_time(fn, rounds: int) -> str:
    """Median wall-clock and CPU seconds (CPU time is steadier on a shared machine)."""
    wall, cpu = [], []
    for _ in range(rounds):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return f"{statistics.median(wall):7.2f} s wall, {statistics.median(cpu):7.2f} s CPU"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()

    import tfplus as tf
    from tfplus import graph_io

    data = build(args.nodes)
    t = time.perf_counter()
    gd = graph_io.parse_graph_def(data)
    parse = time.perf_counter() - t

    def ours():
        with tf.Graph().as_default():
            graph_io.import_graph_def(gd, name="")
    print(f"GraphDef: {len(gd.node)} nodes, {len(data) / 1e6:.1f} MB; parse {parse:.2f} s")
    print(f"tfplus import_graph_def:     {_median_time(ours, args.rounds)}")
    try:
        import tensorflow as tensorflow
    except ImportError:
        print("TensorFlow import_graph_def: (TensorFlow not installed)")
        return
    v1 = tensorflow.compat.v1
    tf_gd = v1.GraphDef.FromString(data)

    def theirs():
        with v1.Graph().as_default():
            v1.import_graph_def(tf_gd, name="")
    print(f"TensorFlow import_graph_def: {_median_time(theirs, args.rounds)}")


if __name__ == "__main__":
    main()
