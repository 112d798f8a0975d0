"""GEMM kernels: ``@`` with its epilogue, and ``@`` followed by a row softmax in one kernel.

**matmul**: one block per BM x BN output tile (and batch index, decoded from a 1-D grid);
the engine's k loop fills the accumulators, then every accumulator element runs the fused
epilogue (bias, activation, scale, casts, masks: any elementwise chain) and is stored.

**matmul_softmax**: one block per BM-row band of the output (and batch index). Each warp keeps
running statistics for the columns it computes; warps that share rows merge theirs once, at
the end of the statistics pass. The block walks every column tile twice, one flat sequence of
k steps:

* pass 0 (statistics): per column tile, the pre-softmax value ``s`` (the GEMM plus its
  epilogue, masked past N) and an online row maximum and sum of ``exp(s - max)``;
* pass 1 (write): the GEMM tile again (cheap when K is a head dimension), then
  ``exp(s - max) / sum`` (``s - max - log(sum)`` for log_softmax), the elementwise work after
  it, and the stores. The logits never reach memory.

NaN in a row makes the whole row NaN, as NumPy does; a row whose values are all ``-inf`` gives
NaN too (0 / 0), also as NumPy does. A column tile that is all ``-inf`` (a masked block) adds
nothing and leaves the running maximum unscaled.
"""

from __future__ import annotations

import math

from cuvil_dsl.codegen.base import rounds
from cuvil_dsl.codegen.cuda import CudaKernel, Emitted, element_count, indent
from cuvil_dsl.codegen.cuda_gemm import batch_offset, engine, operand
from cuvil_dsl.passes import configs
from cuvil_dsl.types import DType



class _GemmKernel:
    def __init__(self, k: CudaKernel):
        p = k.p
        self.k, self.p = k, p
        self.matmul = k.kernel.anchor
        self.softmax = next((op for op in p.ops.values() if op.op in ("softmax", "log_softmax")), None)
        self.a, self.b = operand(k, self.matmul, 0), operand(k, self.matmul, 1)
        self.M, self.N = p.domain[-2], p.domain[-1]
        self.batch = element_count(p.domain[:-2])
        kind = "matmul_softmax" if self.softmax is not None else "matmul"
        k.config = configs.sized_tiles(k.config, kind, configs.uses_tensor_cores(self.a.dtype, k.arch, k.tf32),
                                       self.blocks, k.sm_count, self.a.depth)
        self.eng = engine(k, self.a, self.b)
        self.mt = -(-self.M // self.eng.bm)
        self.nt = -(-self.N // self.eng.bn)
        self.kt = -(-self.a.depth // self.eng.bk)
        self.dtype: DType = k.dtype(self.matmul)
        self.ctype = k.lang.ctype(self.dtype)

    def blocks(self, bm: int, bn: int) -> int:
        """Blocks a launch with this tile takes (a softmax block owns whole rows)."""
        rows = -(-self.M // bm)
        return self.batch * rows * (1 if self.softmax is not None else -(-self.N // bn))

    # ------------------------------------------------------------------ per-element work
    def coord(self, d: int) -> str:
        rank = len(self.p.domain)
        return "m" if d == rank - 2 else "n" if d == rank - 1 else f"c{d}"

    def walk(self, lines: list[str], stats: tuple[str, str] | None = None):
        """A walk over one accumulator element; ``stats`` names the row max and sum arrays."""
        k = self.k
        holder: dict = {}

        def anchor(value: str, m) -> str | None:
            if value == self.matmul:
                op = k.p.ops[value]
                return bind(op, "ACC")
            if self.softmax is not None and value == self.softmax.out and stats is not None:
                x = holder["w"].value(self.softmax.args[0], m)
                mx, total = f"{stats[0]}[slot]", f"{stats[1]}[slot]"
                exp, log = k.lang.function("exp", self.dtype), k.lang.function("log", self.dtype)
                if self.softmax.op == "softmax":
                    expr = f"{exp}({x} - {mx}) / {total}"
                else:
                    expr = f"({x} - {mx}) - {log}({total})"
                return bind(self.softmax, expr)
            return None

        def bind(op, expr: str) -> str:
            name = k.fresh()
            value = k.lang.round(expr, self.dtype) if rounds(op) else expr
            lines.append(f"const {self.ctype} {name} = {value};")
            return name

        w = k.walk(lines.append, self.coord, None, None, anchor)
        holder["w"] = w
        return w

    def store_body(self, stats: tuple[str, str] | None) -> list[str]:
        lines: list[str] = []
        w = self.walk(lines, stats)
        for s in self.p.stores:
            lines += self.k.store_lines(s, w.value(s.value, s.map), self.coord)
        return [f"if (m < {self.M} && n < {self.N}) {{", *indent(lines), "}"]

    # ------------------------------------------------------------------ skeleton
    def prologue(self, decode: list[str]) -> list[str]:
        k, eng = self.k, self.eng
        out = eng.setup() + decode
        batch_shape = self.p.domain[:-2]
        inner = 1
        for d in reversed(range(len(batch_shape))):
            div = f"bz / {inner}" if inner > 1 else "bz"
            out.append(f"const int c{d} = ({div}) % {batch_shape[d]};")
            inner *= batch_shape[d]
        out += [f"const int m0 = mt * {eng.bm};",
                f"const {k.storage(self.a.buffer)}* pa = {self.a.pointer} + {batch_offset(k, self.a)};",
                f"const {k.storage(self.b.buffer)}* pb = {self.b.pointer} + {batch_offset(k, self.b)};"]
        return out + eng.zero()

    def render_plain(self, entry: str) -> Emitted:
        eng = self.eng
        decode = [f"const int nt = blockIdx.x % {self.nt};", f"const int mt = blockIdx.x / {self.nt} % {self.mt};",
                  f"const int bz = blockIdx.x / {self.nt * self.mt};"]
        body = self.prologue(decode) + [f"const int n0 = nt * {eng.bn};"]
        body += eng.main_loop(self.kt, lambda s: f"({s}) * {eng.bk}", lambda s: "n0", "m0", ("pa", "pb"), [])
        body += eng.elements("m0", "n0", self.store_body(None))
        lines = [*self.k.signature(entry, eng.threads), *indent(body), "}"]
        return Emitted(lines, (self.batch * self.mt * self.nt, 1, 1), (eng.threads, 1, 1), eng.shared_bytes,
                       eng.helpers())

    def render_softmax(self, entry: str) -> Emitted:
        k, eng = self.k, self.eng
        kt, nt = self.kt, self.nt
        decode = [f"const int mt = blockIdx.x % {self.mt};", f"const int bz = blockIdx.x / {self.mt};"]
        neg_inf = k.lang.literal(-math.inf, self.dtype)
        body = self.prologue(decode)
        body += [f"{self.ctype} row_max[{eng.slots}], row_sum[{eng.slots}];",
                 "#pragma unroll", f"for (int r = 0; r < {eng.slots}; ++r) {{",
                 f"    row_max[r] = {neg_inf};", "    row_sum[r] = 0;", "}"]
        stats = self.statistics(neg_inf)
        if eng.warps_n > 1:
            stats += [f"if (step == {kt * nt - 1}) {{", *indent(self.merge_warps()), "}"]
        tile_end = [f"const int n0 = step / {kt} % {nt} * {eng.bn};",
                    f"if (step < {kt * nt}) {{", *indent(stats), "} else {",
                    *indent(eng.elements("m0", "n0", self.store_body(("row_max", "row_sum")))), "}",
                    *eng.zero()]
        after = [f"if (step % {kt} == {kt - 1}) {{", *indent(tile_end), "}"]
        body += eng.main_loop(2 * kt * nt, lambda s: f"({s}) % {kt} * {eng.bk}",
                              lambda s: f"({s}) / {kt} % {nt} * {eng.bn}", "m0", ("pa", "pb"), after)
        lines = [*k.signature(entry, eng.threads), *indent(body), "}"]
        return Emitted(lines, (self.batch * self.mt, 1, 1), (eng.threads, 1, 1), eng.shared_bytes, eng.helpers())

    def statistics(self, neg_inf: str) -> list[str]:
        """Online max and sum of one column tile (lanes of a row combine by shuffles)."""
        k, eng = self.k, self.eng
        exp = k.lang.function("exp", self.dtype)
        pre: list[str] = []
        w = self.walk(pre)
        x = w.value(self.softmax.args[0], self.p.layout.maps[self.softmax.args[0]])
        per_element = [f"{self.ctype} s = {neg_inf};",
                       f"if (m < {self.M} && n < {self.N}) {{", *indent(pre), f"    s = {x};", "}",
                       "ACC = s;", "tile_max[slot] = cvl_max(tile_max[slot], s);"]
        lanes = eng.row_lanes
        return [
            f"{self.ctype} tile_max[{eng.slots}], tile_sum[{eng.slots}], rescale[{eng.slots}];",
            "#pragma unroll", f"for (int r = 0; r < {eng.slots}; ++r) {{ tile_max[r] = {neg_inf}; tile_sum[r] = 0; }}",
            *eng.elements("m0", "n0", per_element),
            "#pragma unroll", f"for (int r = 0; r < {eng.slots}; ++r) {{",
            f"    const {self.ctype} top = cvl_max(row_max[r], cvl_warp_max(tile_max[r], {lanes}));",
            f"    rescale[r] = row_max[r] == top ? 1 : {exp}(row_max[r] - top);",
            "    row_max[r] = top;", "}",
            *eng.elements("m0", "n0", [f"tile_sum[slot] += ACC == {neg_inf} ? 0 : {exp}(ACC - row_max[slot]);"]),
            "#pragma unroll", f"for (int r = 0; r < {eng.slots}; ++r)",
            f"    row_sum[r] = row_sum[r] * rescale[r] + cvl_warp_sum(tile_sum[r], {lanes});",
        ]


    def merge_warps(self) -> list[str]:
        """After the last column tile: the warps that split a row's columns combine their
        running maxima and sums (the same log-sum-exp merge as between column tiles)."""
        k, eng = self.k, self.eng
        exp = k.lang.function("exp", self.dtype)
        shape = f"[{eng.warps_n}][{eng.bm}]"
        row = eng.slot_row("r")
        return [
            f"__shared__ {self.ctype} warp_max{shape}, warp_sum{shape};",
            "#pragma unroll", f"for (int r = 0; r < {eng.slots}; ++r) {{",
            f"    if (lane % {eng.row_lanes} == 0) {{",
            f"        warp_max[{eng.column_warp()}][{row}] = row_max[r];",
            f"        warp_sum[{eng.column_warp()}][{row}] = row_sum[r];", "    }", "}",
            "__syncthreads();",
            "#pragma unroll", f"for (int r = 0; r < {eng.slots}; ++r) {{",
            f"    {self.ctype} top = warp_max[0][{row}];",
            "#pragma unroll", f"    for (int w = 1; w < {eng.warps_n}; ++w) top = cvl_max(top, warp_max[w][{row}]);",
            f"    {self.ctype} total = 0;",
            "#pragma unroll", f"    for (int w = 0; w < {eng.warps_n}; ++w) {{",
            f"        const {self.ctype} m = warp_max[w][{row}];",
            f"        total += warp_sum[w][{row}] * (m == top ? 1 : {exp}(m - top));", "    }",
            "    row_max[r] = top;", "    row_sum[r] = total;", "}",
        ]


def render(k: CudaKernel, entry: str) -> Emitted:
    g = _GemmKernel(k)
    return g.render_softmax(entry) if g.softmax is not None else g.render_plain(entry)
