"""Compile every fastnet Triton kernel for sm_80 and sm_90 (no GPU needed) and print the
resource table: registers, shared memory, stack, local memory, spill stores/loads.

    python cuda/compile_check.py [--heads 16,32,64,128] [--arch 80,90]
"""
from __future__ import annotations

import argparse
import json
import os
import time

os.environ.pop("TRITON_INTERPRET", None)  # real compilation, not the interpreter

from fastnet.kernels.compile_report import all_specs, compile_spec, format_table


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--heads", default="16,32,64,128")
    ap.add_argument("--arch", default="80,90")
    ap.add_argument("--json", default=None, help="also write the reports to this JSON file")
    a = ap.parse_args()
    heads = tuple(int(x) for x in a.heads.split(","))
    reports = []
    t0 = time.time()
    for spec in all_specs(heads):
        for arch in (int(x) for x in a.arch.split(",")):
            reports.append(compile_spec(spec, arch))
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
