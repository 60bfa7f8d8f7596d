"""Memory budgets of phone-class devices, for `tfplus plan --device-profile NAME`.

`ram_bytes` is the device's installed RAM from the maker's specification. `usable_bytes` is what one training
process may hold, and it is an ASSUMPTION, not a measurement: Android lets a native process allocate until the
low-memory killer steps in, which depends on what else runs; we take a quarter of the RAM, a level a
foreground app reaches without the system killing background services' memory from under it on these
devices. (The Java-heap limits, dalvik.vm.heapsize = 512m on all four, do not bound native allocations.)
On the GPU, OpenCL buffers come out of the same RAM; one arena must also respect the driver's
CL_DEVICE_MAX_MEM_ALLOC_SIZE (usually a quarter of the global memory), which `usable_bytes` does.
"""
from __future__ import annotations

from typing import NamedTuple

GB = 10**9
GiB = 2**30


class Profile(NamedTuple):
    name: str
    description: str
    ram_bytes: int
    usable_bytes: int
    source: str


PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile("nexus5", "LG/Google Nexus 5 (2013), Snapdragon 800, Adreno 330", 2 * GiB, 2 * GiB // 4,
            "2 GB LPDDR3: Google Nexus 5 tech specs; device of Chen et al. (TensorFlow+), 2018/2019"),
    Profile("nexus7", "Asus/Google Nexus 7 (2013), Snapdragon S4 Pro, Adreno 320", 2 * GiB, 2 * GiB // 4,
            "2 GB DDR3L: Google Nexus 7 (2013) tech specs (the 2012 model has 1 GB; we assume the 2013 one); "
            "device of Chen et al. (TensorFlow+)"),
    Profile("pixel2", "Google Pixel 2 (2017), Snapdragon 835, Adreno 540", 4 * GiB, 4 * GiB // 4,
            "4 GB LPDDR4x: Google Pixel 2 tech specs; device of Chen et al. (TensorFlow+)"),
    Profile("galaxy-s8", "Samsung Galaxy S8 (2017, US model), Snapdragon 835, Adreno 540",
            4 * GiB, 4 * GiB // 4,
            "4 GB LPDDR4: Samsung Galaxy S8 specifications; the THOMAS project's target device "
            "(majeedthaika.github.io/THOMAS)"),
)}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name.lower()]
    except KeyError:
        raise ValueError(f"--device-profile: unknown profile {name!r}; known: {', '.join(PROFILES)}") \
            from None
