#!/usr/bin/env python3
"""Summarise Nsight Compute's per-instruction (SASS) counters of one kernel, and list them annotated.

On the GPU machine, profile with the source counters and export the source page as CSV:

    ncu --section SourceCounters --section WarpStateStats -k regex:qk_softmax --launch-skip 1 \\
        --launch-count 1 -f -o v python3 benchmarks/ncu_attention.py '{}'
    ncu --import v.ncu-rep --page source --print-source sass --csv > v-source.csv

then, anywhere (no GPU or ncu needed):

    python3 benchmarks/ncu_source.py v-source.csv --elements 134217728 --per 32768 --listing v.txt

prints the instructions issued per element (``--elements``: what the kernel computes, e.g. attention's
logits), the warp stall samples by reason, the opcode mix, the share of samples on mbarrier waits
(the branch after each ``SYNCS.PHASECHK`` try) and the hottest instructions; ``--listing`` writes every
instruction with its executions (divided by ``--per``, e.g. warps x bands for "per warp and band"),
samples and two top stall reasons. Exit status 1 for a file that is not such an export.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

EXECUTED = "Instructions Executed"
SAMPLES = "Warp Stall Sampling (All Samples)"


@dataclass
class Line:
    index: int
    sass: str
    executed: float
    samples: float
    stalls: dict[str, float] = field(default_factory=dict)

    @property
    def opcode(self) -> str:
        """The opcode without modifiers or predicate: ``@!P2 BRA 0x...`` -> ``BRA``."""
        words = self.sass.split()
        word = words[1] if words and words[0].startswith("@") and len(words) > 1 else (words[0] if words else "")
        return word.split(".")[0]


def _number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def read(path: Path) -> list[Line]:
    """The instructions of the export at ``path`` (ncu writes a "Kernel Name" row, then the header)."""
    rows = list(csv.reader(path.read_text(errors="replace").splitlines()))
    start = next((i for i, r in enumerate(rows) if "Source" in r and EXECUTED in r), None)
    if start is None:
        raise ValueError(f"{path}: no 'Source' and '{EXECUTED}' columns: not `ncu --page source --csv` output")
    header = rows[start]
    col = {h: i for i, h in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    out = []
    for n, r in enumerate(rows[start + 1:]):
        if len(r) < len(header):
            continue
        out.append(Line(n, r[col["Source"]].strip(), _number(r[col[EXECUTED]]),
                        _number(r[col[SAMPLES]]) if SAMPLES in col else 0.0,
                        {h[len("stall_"):]: _number(r[col[h]]) for h in reasons if _number(r[col[h]])}))
    return out


def summary(lines: list[Line], elements: int | None = None, top: int = 12) -> str:
    executed = sum(x.executed for x in lines)
    samples = sum(x.samples for x in lines) or 1.0
    out = [f"instructions executed (warp level): {executed:,.0f}"]
    if elements:
        out.append(f"issued instructions per element: {executed * 32 / elements:.2f}")
    stalls: Counter = Counter()
    for x in lines:
        stalls.update(x.stalls)
    out.append("stall samples by reason: " + ", ".join(f"{k} {v / samples:.1%}" for k, v in stalls.most_common(10)))
    mix: Counter = Counter()
    for x in lines:
        mix[x.opcode] += x.executed
    out.append("opcode mix: " + ", ".join(f"{k} {v / (executed or 1):.1%}" for k, v in mix.most_common(16)))
    waits = sum(x.samples for prev, x in zip(lines, lines[1:]) if "PHASECHK" in prev.sass and x.opcode == "BRA")
    out.append(f"samples on mbarrier waits: {waits / samples:.1%}")
    out.append("hottest instructions (samples):")
    for x in sorted(lines, key=lambda x: -x.samples)[:top]:
        out.append(f"  {x.index:5d} {x.samples / samples:6.1%}  {x.sass[:70]}")
    return "\n".join(out)


def listing(lines: list[Line], per: float = 1.0) -> str:
    rows = []
    for x in lines:
        reasons = " ".join(f"{k}={v:.0f}" for k, v in sorted(x.stalls.items(), key=lambda kv: -kv[1])[:2])
        rows.append(f"{x.index:5d} {x.executed / per:9.2f} {x.samples:6.0f} {x.sass[:60]:60s} {reasons}".rstrip())
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", type=Path)
    ap.add_argument("--elements", type=int, help="elements the kernel computes, for instructions per element")
    ap.add_argument("--per", type=float, default=1.0, help="divide the listing's executions by this")
    ap.add_argument("--listing", type=Path, help="write the annotated instructions here")
    args = ap.parse_args(argv)
    try:
        lines = read(args.csv)
    except (OSError, ValueError) as exc:
        print(f"ncu_source: {exc}", file=sys.stderr)
        return 1
    print(summary(lines, args.elements))
    if args.listing:
        args.listing.write_text("# index, executions (/ --per), warp stall samples, SASS, top two stall reasons\n"
                                + listing(lines, args.per))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
