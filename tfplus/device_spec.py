"""TF1's device strings ('/job:worker/replica:0/task:1/device:GPU:0', '/gpu:0', '/cpu:0'): tf.DeviceSpec and how
nested tf.device blocks merge them into an op's `device`. They are the graph's metadata: tfplus places a whole
step on the Session's device (a Session(device=...) or the CLI's --device), as TensorFlow's soft placement does
on a machine with one device.

    >>> DeviceSpec.from_string("/job:ps/task:1/gpu:2").to_string()
    '/job:ps/task:1/device:GPU:2'
"""
from __future__ import annotations

from dataclasses import dataclass
from dataclasses import replace as _replace

__all__ = ["DeviceSpec", "canonical", "merge"]


@dataclass(frozen=True)
class DeviceSpec:
    job: str | None = None
    replica: int | None = None
    task: int | None = None
    device_type: str | None = None
    device_index: int | None = None

    @classmethod
    def from_string(cls, spec: str) -> DeviceSpec:
        """Parses TF's forms: '/job:x/replica:r/task:t/device:TYPE:i', the short '/cpu:0' or '/gpu:*', and
        'CPU:0'. ValueError names the part it cannot read."""
        fields: dict = {}
        for part in (spec or "").split("/"):
            if not part:
                continue
            key, _, value = part.partition(":")
            low = key.lower()
            if low in ("job", "replica", "task") and value:
                fields[low] = value if low == "job" else int(value)
            elif low == "device" and value:
                kind, _, index = value.partition(":")
                fields.update(device_type=kind.upper(), device_index=None if index in ("", "*") else int(index))
            elif low in ("cpu", "gpu"):
                fields.update(device_type=low.upper(), device_index=None if value in ("", "*") else int(value))
            elif part.count(":") == 1 and key.isupper():  # 'CPU:0'
                fields.update(device_type=key, device_index=None if value in ("", "*") else int(value))
            else:
                raise ValueError(f"tf.device: cannot read {part!r} of the device string {spec!r} (forms: "
                                 "'/job:NAME/replica:R/task:T/device:TYPE:I', '/cpu:0', '/gpu:0')")
        return cls(**fields)

    def to_string(self) -> str:
        out = ""
        if self.job is not None:
            out += f"/job:{self.job}"
        if self.replica is not None:
            out += f"/replica:{self.replica}"
        if self.task is not None:
            out += f"/task:{self.task}"
        if self.device_type is not None:
            out += f"/device:{self.device_type}:{'*' if self.device_index is None else self.device_index}"
        return out

    def make_merged_spec(self, dev: DeviceSpec) -> DeviceSpec:
        """This spec with every field that `dev` sets taken from `dev`."""
        return _replace(self, **{k: v for k, v in vars(dev).items() if v is not None})

    def replace(self, **fields) -> DeviceSpec:
        return _replace(self, **fields)


def canonical(spec: str) -> str:
    return DeviceSpec.from_string(spec).to_string()


def merge(outer: str, current: str) -> str:
    """TF1's nesting: the op's `current` device keeps its fields; `outer` (a tf.device further out) fills the
    rest."""
    return DeviceSpec.from_string(outer).make_merged_spec(DeviceSpec.from_string(current)).to_string()
