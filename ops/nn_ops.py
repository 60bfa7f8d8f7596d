"""Neural-network ops (conv, pooling, activations, losses). Each op: registration, gradient, wrapper."""
from __future__ import annotations

__all__: list[str] = []
