"""TF1's timeline.Timeline: a traced run's step stats (RunMetadata.step_stats) in the Chrome trace format.

    run_metadata = tf.RunMetadata()
    sess.run(train_op, options=tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE), run_metadata=run_metadata)
    trace = timeline.Timeline(run_metadata.step_stats).generate_chrome_trace_format()
    open("timeline.json", "w").write(trace)          # chrome://tracing

As TF's: a process per device and an event per node, named by its op type, with args {"name": node, "op": type}.
tfplus.profiler.chrome_trace gives more (phases, FLOPs, bytes, OpenCL kernels, transfers).
"""
from __future__ import annotations

import json

__all__ = ["Timeline"]


class Timeline:
    def __init__(self, step_stats, graph=None):
        self._step_stats = step_stats

    def generate_chrome_trace_format(self, show_dataflow: bool = True, show_memory: bool = False,
                                     op_time: str = "schedule") -> str:
        events = []
        for pid, dev in enumerate(self._step_stats.dev_stats):
            events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": dev.device}})
            for node in dev.node_stats:
                op = getattr(node, "op_type", None) or node.timeline_label.partition(" = ")[2].partition("(")[0]
                events.append({"ph": "X", "cat": "Op", "name": op or node.node_name, "pid": pid, "tid": 0,
                               "ts": node.all_start_micros, "dur": node.all_end_rel_micros,
                               "args": {"name": node.node_name, "op": op}})
        return json.dumps({"traceEvents": events}, indent=None)
