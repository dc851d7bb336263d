"""Let PyPI's torchvision import next to a CPU-only torch (host venv of a machine without a GPU).

PyPI's Linux torchvision wheels are CUDA builds: with the CPU torch their ``_C`` extension does not load
(``libc10_cuda.so: cannot open shared object file``), and torchvision's ``_meta_registrations`` then dies
at ``register_fake("torchvision::nms")`` ("operator torchvision::nms does not exist"). SGLang's
``bench_serving`` imports ``torchvision.transforms`` on the way (``sglang.srt.configs`` →
``internvl_utils``) but never runs a torchvision operator. This hook, installed by a ``.pth`` file in
the host venv only, defines the schemas of the two ops torchvision registers unconditionally, just before
``torchvision._meta_registrations`` runs and only when the C++ ops did not load; calling them still fails.
Nothing is imported at interpreter start.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

TARGET = "torchvision._meta_registrations"
SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_libraries: list[object] = []


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        import torch
        import torchvision.extension

        if not torchvision.extension._has_ops():
            library = torch.library.Library("torchvision", "FRAGMENT")
            for op, schema in SCHEMAS.items():
                if not torch._C._dispatch_has_kernel(f"torchvision::{op}"):
                    library.define(schema)
            _libraries.append(library)  # keep the definitions alive
        return importlib.machinery.PathFinder.find_spec(name, path, target)


def install() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


install()
