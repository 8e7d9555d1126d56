"""Compile every fastnet Triton kernel for sm_80 and sm_90 (no GPU needed) and print the
resource table: registers, shared memory, stack, local memory, spill stores/loads. The
compilations run in one process per CPU.

    python cuda/compile_check.py [--heads 16,32,64,128] [--arch 80,90]
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor

os.environ.pop("TRITON_INTERPRET", None)  # real compilation, not the interpreter

from fastnet.kernels.compile_report import all_specs, compile_spec, format_table


@functools.cache
def _specs(heads: tuple[int, ...]) -> list:
    return all_specs(heads)


def _compile(job: tuple[tuple[int, ...], int, int]):
    """A worker's compilation of kernel ``index`` of ``_specs(heads)`` for ``arch``: its report
    without the spec, whose kernel function does not pickle."""
    heads, index, arch = job
    return dataclasses.replace(compile_spec(_specs(heads)[index], arch), spec=None)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--heads", default="16,32,64,128")
    ap.add_argument("--arch", default="80,90")
    ap.add_argument("--json", default=None, help="also write the reports to this JSON file")
    a = ap.parse_args()
    heads = tuple(int(x) for x in a.heads.split(","))
    specs = _specs(heads)
    jobs = [(heads, i, int(arch)) for i in range(len(specs)) for arch in a.arch.split(",")]
    t0 = time.time()
    with ProcessPoolExecutor() as pool:  # one worker per CPU
        reports = [dataclasses.replace(r, spec=specs[i]) for (_, i, _), r in zip(jobs, pool.map(_compile, jobs))]
    print(format_table(reports))
    if a.json:
        with open(a.json, "w") as f:
            json.dump([dict(name=r.spec.name, label=r.spec.label, arch=r.arch, regs=r.regs, stack=r.stack,
                            local=r.local, shared=r.shared_triton, spill_stores=r.spill_stores,
                            spill_loads=r.spill_loads, d=max(r.spec.constexprs.get(n, 0) for n in ("D", "DK", "DV")))
                       for r in reports], f, indent=1)
    bad = [r for r in reports
           if r.spills and max(r.spec.constexprs.get(n, 0) for n in ("DK", "DV", "D")) <= 64]
    print(f"\n{len(reports)} compilations in {time.time() - t0:.0f}s; spilling kernels at d<=64: {len(bad)} "
          f"({', '.join(sorted({r.spec.name for r in bad})) or 'none'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
