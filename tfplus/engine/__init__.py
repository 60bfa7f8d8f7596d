"""The engine: what runs a graph's steps on a device runtime (tfplus.runtime).

- `session`: tf.Session. It converts fetches and feeds, and compiles each (fetches, fed tensors, fed shapes) once
  into a `step.Step`, which it looks up and runs.
- `step`: a compiled step: its rewritten fetches, the driver that runs it (a memory plan, cpu worker processes,
  replay of a planned step, or the plain executor), and the copy-out of its values under the step lock.
- `executor`: compiles the ops of a step into a flat `Program` and replays it; `KernelContext` is what a kernel
  may ask of it (kernels' documented home for the name).
- `rewrite`: the graph rewrite (fused ops) applied to a step before it is planned or run.
- `memory`: a memory plan's arena and its allocator (`Bound`), and the measuring helpers of planned steps.
- `replay`: record, then replay: the one rule by which programs and micro-batched steps replay recorded launches.
- `workers`: the cpu device's data-parallel worker processes.

Layers: the graph core and ops below, the planner beside (the engine imports it; it imports no engine module).
"""
