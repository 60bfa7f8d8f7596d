"""The memory planner: schedule, liveness, one arena per device, and transformations that fit a budget.

    >>> from tfplus import planner
    >>> p = planner.plan([train_op, loss], {images: (128, 32, 32, 3), labels: (128,)},
    ...                  device="cpu", budget="64MB")                       # doctest: +SKIP
    >>> print(p.summary())                                                 # doctest: +SKIP

`tf.Session(memory_budget="64MB")` plans and runs every step this way (tfplus.engine.memory).
"""
from tfplus.planner.liveness import Buffer, PlanError
from tfplus.planner.plan import (
    TRANSFORMATIONS,
    BudgetError,
    DeviceFacts,
    MemoryPlan,
    fits,
    floor_plan,
    plan,
    smallest_plan,
)

__all__ = ["plan", "smallest_plan", "floor_plan", "fits", "MemoryPlan", "Buffer", "BudgetError", "PlanError",
           "TRANSFORMATIONS", "DeviceFacts"]
