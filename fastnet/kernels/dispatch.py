"""Which implementation a sequence op runs: the Triton kernel or its PyTorch reference.

The mode is ``auto``, ``triton`` or ``reference``; it comes from :func:`set_kernel_mode` (the
config system calls it) or else from the environment variable ``DELTABEAST_KERNELS``
(default ``auto``).

* ``reference``: never the kernels.
* ``triton``: the kernels for every op on CUDA tensors, with no self-check; a failure raises.
  Choosing it where CUDA is unavailable raises at once (unless ``TRITON_INTERPRET=1``, where CPU
  tensors run the kernels in the interpreter: for tests). CPU tensors otherwise take the
  reference (the CPU actors of a GPU learner).
* ``auto``: the reference on the CPU. On CUDA, the first call runs :func:`self_check` once: every
  kernel against its reference on a tiny input, values and gradients. A kernel that fails to
  compile, raises or mismatches is reported in one warning, with the reason, and its ops take the
  reference from then on; the others take Triton.

Sequence ops ask :func:`use_triton` (op name, tensor) before each call.

Why the mode is held per process rather than passed: it describes the process's hardware and
the health of its kernels (the self-check's findings are cached here), as
``torch.backends.cudnn.enabled`` does. Passing it would thread one flag through every core's
``forward`` and every autograd function for a choice that cannot differ between two calls of
one process. The learner sets it once at start-up (``run.kernels``); tests set it per test.
"""
from __future__ import annotations

import os
import warnings
from typing import Literal

import torch

from fastnet.kernels._common import interpreting

KernelMode = Literal["auto", "triton", "reference"]
MODES = ("auto", "triton", "reference")
ENV_VAR = "DELTABEAST_KERNELS"

_mode: KernelMode | None = None
_checked: dict[str, str | None] = {}  # op -> None (passed) or the reason it failed


def _validate(mode: str, source: str) -> KernelMode:
    if mode not in MODES:
        raise ValueError(f"{source}: kernels must be one of {list(MODES)}, got {mode!r}")
    if mode == "triton" and not torch.cuda.is_available() and not interpreting():
        raise RuntimeError(f"{source}: kernels=triton, but torch.cuda.is_available() is False "
                           "(use kernels=auto or kernels=reference on a machine without a GPU)")
    return mode  # type: ignore[return-value]


def set_kernel_mode(mode: KernelMode) -> None:
    """Set the mode for this process (overrides ``DELTABEAST_KERNELS``); clears the self-check cache."""
    global _mode
    _mode = _validate(mode, "set_kernel_mode")
    _checked.clear()


def kernel_mode() -> KernelMode:
    """The current mode: the one set by :func:`set_kernel_mode`, else ``$DELTABEAST_KERNELS``, else auto."""
    global _mode
    if _mode is None:
        _mode = _validate(os.environ.get(ENV_VAR, "auto") or "auto", f"${ENV_VAR}")
    return _mode


def kernels_can_run(device: torch.device) -> bool:
    """Whether Triton kernels can run on ``device`` (CUDA; tests monkeypatch this to simulate a GPU)."""
    return device.type == "cuda"


def use_triton(op: str, x: torch.Tensor, supported: bool = True) -> bool:
    """Whether the sequence op ``op`` (a key of :data:`fastnet.kernels.cases.CASES`) runs its Triton
    kernel on x's device. ``supported``: whether the kernels take these head sizes and dtype; where
    they do not, auto takes the reference and triton calls the kernel anyway (which raises)."""
    mode = kernel_mode()
    if mode == "reference":
        return False
    if mode == "triton":
        return x.is_cuda or (x.device.type == "cpu" and interpreting())
    if not (supported and kernels_can_run(x.device)):
        return False
    if op not in _checked:
        self_check(x.device)
    return _checked[op] is None


def self_check(device: torch.device | str) -> dict[str, str | None]:
    """Run every kernel against its reference on a tiny input on ``device``
    (:func:`fastnet.kernels.cases.check`); cache and return op -> None (passed) or the reason it
    failed, and warn once, listing the failing kernels with their reasons.

    The check takes gradients, so it runs with autograd on even when the first call comes from
    acting under ``torch.no_grad()`` or ``torch.inference_mode()`` (server mode's first batch)."""
    from fastnet.kernels.cases import CASES, check

    with torch.inference_mode(False), torch.enable_grad():
        results = {op: check(op, torch.device(device)) for op in CASES}
    _checked.update(results)
    failed = {op: why for op, why in results.items() if why is not None}
    if failed:
        reasons = "; ".join(f"{op}: {why}" for op, why in failed.items())
        warnings.warn(f"fastnet.kernels (kernels=auto): self-check failed, these ops use the PyTorch reference "
                      f"instead of Triton: {reasons}", RuntimeWarning, stacklevel=3)
    return results
