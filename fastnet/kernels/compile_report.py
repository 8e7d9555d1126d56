"""Compile every kernel for sm_80 / sm_90 without a GPU and read its resource usage.

``triton.compile(ASTSource(...), target=GPUTarget("cuda", cap, 32))`` runs the whole
pipeline down to a cubin on a machine without a GPU. ``CompiledKernel.n_regs / n_spills``
are only filled when the kernel is loaded on a device, so the resources are read from the
cubin with the ``cuobjdump -res-usage`` that ships with Triton (REG, STACK, SHARED, LOCAL),
and spills are counted as local-memory stores (STL) in the SASS (``cuobjdump -sass``).
``metadata.shared`` is Triton's own shared-memory figure (bytes, dynamic).
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

TARGETS = ((80, "sm_80"), (90, "sm_90"))


@dataclass
class KernelSpec:
    name: str
    fn: object
    signature: dict  # arg -> type string ("*fp32", "i32", "constexpr")
    constexprs: dict
    num_warps: int
    label: str  # head sizes etc., for the table
    num_stages: int = 3


@dataclass
class Report:
    spec: KernelSpec
    arch: int
    regs: int
    stack: int
    local: int
    shared_cubin: int
    shared_triton: int
    spill_stores: int
    spill_loads: int

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads


def _tool(name: str) -> str:
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def _attrs(signature: dict) -> dict:
    # pointers 16-byte aligned, as torch allocations are; lets the compiler vectorise loads
    return {(i,): [["tt.divisibility", 16]] for i, t in enumerate(signature.values()) if t.startswith("*")}


def compile_spec(spec: KernelSpec, arch: int) -> Report:
    src = ASTSource(fn=spec.fn, signature=spec.signature, constexprs=spec.constexprs, attrs=_attrs(spec.signature))
    ck = triton.compile(src, target=GPUTarget("cuda", arch, 32),
                        options={"num_warps": spec.num_warps, "num_stages": spec.num_stages})
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        with open(path, "wb") as f:
            f.write(ck.asm["cubin"])
        res = subprocess.run([_tool("cuobjdump"), "-res-usage", path], capture_output=True, text=True,
                             check=True).stdout
        sass = subprocess.run([_tool("cuobjdump"), "-sass", path], capture_output=True, text=True, check=True).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", res)
    if not m:
        raise RuntimeError(f"could not parse cuobjdump -res-usage output:\n{res}")
    regs, stack, shared, local = map(int, m.groups())
    stl = len(re.findall(r"\bSTL(\.\w+)*\b", sass))
    ldl = len(re.findall(r"\bLDL(\.\w+)*\b", sass))
    return Report(spec, arch, regs, stack, local, shared, int(ck.metadata.shared), stl, ldl)


_COMPILED_MODULES: dict = {}


def kernel_module(name: str):
    """``fastnet.kernels.<name>`` (e.g. ``fast_weight.chunk``) with real ``@triton.jit`` kernels.

    Under TRITON_INTERPRET=1 the kernels of the imported module are interpreter objects that
    ``triton.compile`` cannot take, so a second copy of the module is loaded with the
    interpreter switched off (Triton reads the variable when ``@triton.jit`` runs).
    """
    if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        return importlib.import_module(f"fastnet.kernels.{name}")
    if name not in _COMPILED_MODULES:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), *name.split(".")) + ".py"
        old = os.environ["TRITON_INTERPRET"]
        os.environ["TRITON_INTERPRET"] = "0"
        try:
            spec = importlib.util.spec_from_file_location(f"_fastnet_kernels_compiled_{name.replace('.', '_')}", path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        finally:
            os.environ["TRITON_INTERPRET"] = old
        _COMPILED_MODULES[name] = mod
    return _COMPILED_MODULES[name]


def _sig(names_types: str) -> dict:
    out = {}
    for item in names_types.split(","):
        n, t = item.split(":")
        out[n.strip()] = t.strip()
    return out


def fused_recurrent_specs(rule: str, dk: int, dv: int, dtype: str = "fp32") -> list[KernelSpec]:
    fr = kernel_module("fast_weight.fused_recurrent")

    bv = fr.pick_bv(dk, dv)
    w = fr.pick_warps(bv, dk)
    rid = fr.RULE_IDS[rule]
    x = f"*{dtype}"
    lab = f"{rule} dk={dk} dv={dv} BV={bv} {dtype}"
    fwd = KernelSpec(
        f"fused_{rule}_fwd", fr._fw_fwd_kernel,
        _sig(f"q:{x},k:{x},v:{x},beta:{x},g:{x},done:*i8,w0:*fp32,y:{x},wT:*fp32,u_out:*fp32,ckpt:*fp32,"
             "T:i32,H:i32,CHUNK:i32,DK:constexpr,DV:constexpr,BV:constexpr,RULE:constexpr,HAS_W0:constexpr"),
        dict(DK=dk, DV=dv, BV=bv, RULE=rid, HAS_W0=True), w, lab,
    )
    if rule in ("gated", "gated_delta"):
        bwd = KernelSpec(
            f"fused_{rule}_bwd", fr._fw_bwd_gated_kernel,
            _sig(f"q:{x},k:{x},v:{x},beta:{x},g:{x},done:*i8,ckpt:*fp32,scratch:*fp32,dy:{x},dwT:*fp32,"
                 f"dq_p:*fp32,dk_p:*fp32,dv:{x},dbeta_p:*fp32,dg_p:*fp32,dw0:*fp32,T:i32,H:i32,B:i32,CHUNK:i32,"
                 "DK:constexpr,DV:constexpr,BV:constexpr,RULE:constexpr,HAS_DWT:constexpr"),
            dict(DK=dk, DV=dv, BV=bv, RULE=rid, HAS_DWT=True), w, lab,
        )
    else:
        bwd = KernelSpec(
            f"fused_{rule}_bwd", fr._fw_bwd_undo_kernel,
            _sig(f"q:{x},k:{x},v:{x},beta:{x},done:*i8,seg:*i32,w0:*fp32,wT:*fp32,u_in:*fp32,dy:{x},dwT:*fp32,"
                 f"dq_p:*fp32,dk_p:*fp32,dv:{x},dbeta_p:*fp32,dw0:*fp32,T:i32,H:i32,B:i32,"
                 "DK:constexpr,DV:constexpr,BV:constexpr,RULE:constexpr,HAS_W0:constexpr,HAS_DWT:constexpr"),
            dict(DK=dk, DV=dv, BV=bv, RULE=rid, HAS_W0=True, HAS_DWT=True), w, lab,
        )
    return [fwd, bwd]


def all_specs(head_sizes=(16, 32, 64, 128)) -> list[KernelSpec]:
    specs: list[KernelSpec] = []
    for d in head_sizes:
        for rule in ("sum", "delta", "gated", "gated_delta"):
            specs += fused_recurrent_specs(rule, d, d)
    specs += fused_recurrent_specs("delta", 64, 32)  # DPFP-style dk = 2 dv
    specs += fused_recurrent_specs("delta", 32, 32, "bf16")
    specs += fused_recurrent_specs("gated_delta", 32, 32, "bf16")
    for name in ("recurrent_cores.fused_recurrent", "fast_weight.chunk", "srwm.fused_recurrent"):
        if not os.path.exists(os.path.join(os.path.dirname(os.path.abspath(__file__)), *name.split(".")) + ".py"):
            continue
        mod = kernel_module(name)
        for d in head_sizes:
            specs += mod.compile_specs(d, KernelSpec, _sig)
            if name != "recurrent_cores.fused_recurrent":  # bf16 inputs change the load/convert code
                specs += mod.compile_specs(d, KernelSpec, _sig, dtype="bf16")
    return specs


def format_table(reports: list[Report]) -> str:
    lines = [f"{'kernel':<22} {'config':<34} {'arch':>5} {'regs':>5} {'smem(B)':>8} {'stack':>6} {'local':>6} "
             f"{'spill st/ld':>12}"]
    for r in reports:
        lines.append(
            f"{r.spec.name:<22} {r.spec.label:<34} {'sm_' + str(r.arch):>5} {r.regs:>5} {r.shared_triton:>8} "
            f"{r.stack:>6} {r.local:>6} {f'{r.spill_stores}/{r.spill_loads}':>12}"
        )
    return "\n".join(lines)
