"""A model of the warp-specialised attention kernel's synchronisation, run on its generated lines.

:func:`simulate` executes the producer's and the consumers' lines of one block (``_WsAttention.producer`` and
``consumer``) as the GPU would order them, in a random interleaving: mbarriers with phases and arrival counts
(a TMA copy completes its barrier at once), named barriers (``bar.sync``/``bar.arrive``), loops over tiles and
work items, and the slots' contents. It fails on what the GPU would do wrong or never finish:

* a deadlock (every thread waits);
* a wgmma that reads a slot not holding the tile it should (K tiles and V tiles each in order 0..nt-1 of
  each work item, Q of the work item);
* a copy into a slot whose last tile a consumer has read and not yet released.

With "skip" the consumers branch on a warpgroup's vote over data (is a key tile ``stages`` + 1 ahead masked out?): the
model takes each vote at random, so every path of the skipping loop meets the barriers; a skipped tile counts as
read (its K and V slots waited for and released unread). The votes go to shared memory, where the producer reads
them to leave a tile every warpgroup voted out unloaded: the model fails when the producer reads a vote not yet
written or already overwritten by a later tile's, and (through the slots' contents) when a warpgroup reads a
tile that was not loaded.

With "skip": "list" the block's key tiles to compute (``cvl_tiles``, ``cvl_cnt`` of them) and the consumers' verdict
(is every skip exact? if not, every tile again, the uses of the slots counted on) are data too: the model draws the
list and the verdict at random, and fails when the producer reads the verdict before the consumers published it, or
a consumer reads a slot not holding the tile of the sequence (the list, then with a second pass every tile). With
"trim" each warpgroup computes the listed tiles up to its own last (drawn too) and releases the rest unread.

With "unroll" the consumers' loop runs in rounds (``t += S``), each copy of its body naming its slots as constants and
its barriers' phase through the round's ``cvl_ph``: the model runs them as written, so a copy that names the wrong slot
reads the wrong tile, and one that waits for the wrong phase deadlocks or passes early. With "skip": "list" a round
runs where its S listed tiles are all "bare" (and none follows left-out tiles), else one tile: the model draws the
entries' bare bits (and ``fold_flip``) and evaluates the kernel's own test.

Each consumer warpgroup runs as its 4 warps, each an actor of its own (``warps``): only warp 0 runs the lines
of the warpgroup's releasing thread (``threadIdx.x % 128 == 0``), and the warps meet only where the GPU makes
them: at each wgmma (``cvl_wgmma_fence`` before a product; the warpgroup issues it together) and at each vote.
So a warp may lag behind warp 0 between those points, and an mbarrier's parity then aliases as on the GPU: a warp
that waits for a tile's phase after the slot was released and filled again waits for a phase that never comes
(the skipping loop's hang of sessions 24-27, where every warp waited for a skipped tile and warp 0 released it).

Lines that move no data and touch no barrier (the arithmetic) are skipped; a block of them is skipped whole,
after checking that no barrier or copy hides in it. The interpreter knows just the shapes of line this
kernel emits; a new shape fails loudly.
"""

from __future__ import annotations

import random
import re

from cuvil_dsl.codegen.cuda_attention import LIST_BARE, LIST_GAP

_FOR_T = re.compile(r"for \(int t = (.+?); t < (.+?); (?:\+\+t|t \+= (\d+))\) \{$")  # "unroll": rounds of S tiles
_PHASE = re.compile(r"const unsigned cvl_ph = (.+);$")  # "unroll": the round's phase of the slots' barriers
_FOR_OPEN = re.compile(r"for \(int t = (.+?); t < (.+?); \) \{$")  # "unroll" with "list": t stepped in the body
_ROUND = re.compile(r"const bool cvl_round = (.+);$")  # ... by a round (t += S) where its S tiles are bare, else by 1
_STEP = re.compile(r"(?:\+\+t|t \+= (\d+));$")
_FOR_ITEMS = re.compile(r"for \(int i = 0, it = blockIdx\.x, g = 0; it < (\d+); \+\+i, it \+= gridDim\.x, g \+= (\d+)\) \{$")
_IF_LINE = re.compile(r"if \((.+?)\) ((?:cvl_|asm ).*)$")
_STAGE = re.compile(r"const unsigned stage = (.+) % (\d+), use = (.+) / (\d+);$")
_WAIT = re.compile(r"cvl_mbar_wait\(bars(?: \+ 8 \* (.+?))?, (.+)\);$")
_ARRIVE = re.compile(r"cvl_mbar_arrive\(bars \+ 8 \* (.+)\);$")
_EXPECT = re.compile(r"cvl_mbar_expect_tx\(bars(?: \+ 8 \* (.+?))?, \d+u\);$")
_COPY = re.compile(r"cvl_tma_[23]d\((s[qkv])(?: \+ (.+?))?, tma_[qkv],")
_READ = re.compile(r"desc_([kv]) \+ \(\(\((.+?)\) \* \d+ \+")
_NAMED = re.compile(r'asm volatile\("bar\.(sync|arrive) (%0|\d+), 256;\\n"(?: :: "r"\((.+?)\))?')
_EVENTS = ("cvl_mbar", "cvl_tma", "desc_k +", "desc_v +", "bar.sync", "bar.arrive", "cvl_pend", "cvl_skip =",
           "cvl_vote", "cvl_plan", "cvl_gone", "cvl_redo", "cvl_again", "cvl_consumers_any", "tk =",
           "cvl_own =", "cvl_ph =", "cvl_round")
# "skip" (a masked tile's products left out): its flags, declared, set and branched on; the vote that sets cvl_vote
# is data (the mask, the rows' maxima), so the model draws it at random
_FLAG_DECL = re.compile(r"(?:bool|int|unsigned) (cvl_(?:skip|pend|vote|plan))(?: = (\w+))?;$")
_FLAG_SET = re.compile(r"(cvl_pend|cvl_vote) = (\d|false|true);$")
_VOTE = re.compile(r"cvl_vote = cvl_wg_all\(")
_PLAN_ADD = re.compile(r"cvl_plan \|= \(unsigned\)cvl_vote << (\d+);$")
_PLAN_NEXT = re.compile(r"cvl_skip = \(__shfl_sync\(0xffffffffu, cvl_plan, 0\) & 1u\) != 0;$")
_PUBLISH = re.compile(r"cvl_votes\[\((.+)\) % (\d+) \* (\d+) \+ wg\] = cvl_vote;$")
_GONE = re.compile(r"const bool cvl_gone = \((.+?)\) && cvl_all_voted\(cvl_votes \+ \((.+)\) % (\d+) \* (\d+), (\d+)\);$")
_IF_FLAG = re.compile(r"if \((cvl_(?:skip|pend|gone|again|redo|round))\) \{$")
# "skip": "list": the key tile of a use of the slots; the consumers' verdict, taken together and published
_TILE = re.compile(r"const int tk = (.+);$")
_OWN = re.compile(r"const int cvl_own = (?:__shfl_sync\(0xffffffffu, (.+), 0\)|(.+));$")  # "trim": a warpgroup's own
_UNREAD = "for (int t = cvl_own; t < cvl_cnt; ++t) {"  # "trim": the listed tiles after its own, released unread
_AGAIN = re.compile(r"const bool cvl_again = cvl_consumers_any\(!cvl_ok, (\d+)u\);$")
_IF_DATA = re.compile(r"if \((cvl_own > 0|wg == 0 && threadIdx\.x % 128 == 0)\) \{$")
_BOOL = {"false": 0, "true": 1}


def _c(expr: str, env: dict) -> int:
    """A C integer expression of the kernel's (non-negative operands) in Python."""
    py = re.sub(r"(\d+)u\b", r"\1", expr).replace("/", "//").replace("&&", " and ").replace("||", " or ")
    py = re.sub(r"!(?!=)", " not ", py)
    py = py.replace("threadIdx.x % 128 == 0", "lead")  # the warpgroup's releasing thread: in warp 0 alone
    return int(eval(py, {}, env))  # noqa: S307 - the kernel's own generated expressions


def _blocks(lines: list[str]) -> list:
    """Lines as a tree: a str, or (header, children) for a line ending in ``{`` (up to its ``}``)."""
    out, i = [], 0
    lines = [ln.split("//")[0].strip() for ln in lines]
    lines = [ln for ln in lines if ln and not ln.startswith("#pragma")]
    while i < len(lines):
        ln = lines[i]
        if ln.endswith("{") and not ln.startswith("}"):  # (an "} else {" stays inside its if's block)
            depth, j = 1, i + 1
            while depth:
                depth += lines[j].count("{") - lines[j].count("}")
                j += 1
            out.append((ln, _blocks(lines[i + 1:j - 1])))
            i = j
        else:
            out.append(ln)
            i += 1
    return out


class Block:
    """The shared state of one block: barriers, named barriers, slots."""

    def __init__(self, k, items: list[int]):
        s = k.stages
        self.k, self.items, self.stages = k, items, s
        count = [1] * (1 + 2 * s) + [k.groups] * (2 * s + 1)  # Q, K full, V full; K empty, V empty, Q empty
        self.need = count
        self.arrivals = [0] * len(count)
        self.phases = [0] * len(count)
        self.named = {}  # id -> [arrivals this generation, generation]
        self.waiting: dict[str, str] = {}  # thread -> the line it last waited on
        self.version = 0  # counts arrivals: a thread that waited before the last one may pass now
        self.slots = {("q", 0): None, **{(w, j): None for w in "kv" for j in range(s)}}
        self.busy = {key: set() for key in self.slots}  # consumers that read the slot's tile and have not released it
        self.warps = 1
        self.met: dict[tuple, list[int]] = {}  # (warpgroup, point) -> how many times each of its warps got there
        self.votes: dict[str, list[int]] = {}  # warpgroup -> its votes so far (every warp reads the same)
        self.published: dict[tuple, tuple] = {}  # (ring entry, warpgroup) -> (tile counted over the block, vote)
        self.sequence = list(range(k.nt))  # the key tiles each work item's consumers read, in order
        self.tiles, self.redo, self.verdict = [], False, None  # "skip": "list": the list, the verdict, published?
        self.mine: list[int] = []  # "trim": each warpgroup's listed tiles, up to its last
        if getattr(k, "listed", False):
            self.need[k.verdict] = 1  # the verdict's barrier: the first consumer thread's arrival

    def draw(self, rng: random.Random) -> None:
        """"skip": "list": the block's listed tiles (some of them, in order, perhaps none) and the verdict."""
        self.tiles = sorted(rng.sample(range(self.k.nt), rng.randint(0, self.k.nt)))
        # the entries as the kernel writes them (listed_tiles): the tile, LIST_GAP after left-out tiles, LIST_BARE
        # (drawn: most tiles, so that the rounds of "unroll" run)
        self.entries = [t | (LIST_GAP if i and t != self.tiles[i - 1] + 1 else 0)
                        | (LIST_BARE if rng.random() < 0.8 else 0) for i, t in enumerate(self.tiles)]
        self.redo = rng.random() < 0.5 or not self.tiles
        self.sequence = self.tiles + (list(range(self.k.nt)) if self.redo else [])
        self.mine = [rng.randint(0, len(self.tiles)) for _ in range(self.k.groups)]

    def meet(self, group: str, warp: int, point: str, size: int | None = None):
        """A generator: warp ``warp`` of ``group`` at its next ``point`` (a wgmma, a vote), waiting for the
        warpgroup's other warps (or the ``size`` warps of ``group``) to get there too."""
        counts = self.met.setdefault((group, point), [0] * (size or self.warps))
        counts[warp] += 1
        self.version += 1
        while min(counts) < counts[warp]:
            yield "wait"

    def arrive(self, bar: int) -> None:
        self.version += 1
        self.arrivals[bar] += 1
        assert self.arrivals[bar] <= self.need[bar], f"barrier {bar}: more arrivals than its count"
        if self.arrivals[bar] == self.need[bar]:
            self.arrivals[bar] = 0
            self.phases[bar] += 1

    def passed(self, bar: int, parity: int) -> bool:
        return self.phases[bar] & 1 != parity


def _split_else(body: list) -> tuple[list, list]:
    """An if's block as (then, else): its children up to and after a top-level ``} else {``."""
    if "} else {" in body:
        i = body.index("} else {")
        return body[:i], body[i + 1:]
    return body, []


def _actor(block: Block, tree: list, env: dict, who: str, reads: dict, votes: random.Random | None = None,
           group: str | None = None, warp: int = 0):
    """A generator running ``tree`` for thread ``who``: yields None after each step, "wait" while blocked.
    ``votes`` draws the skip votes (a consumer's); ``group`` is the consumer warpgroup whose warp ``warp`` this
    is (the slots it reads are held by the warpgroup: warp 0 releases them)."""
    s = block.stages
    group = group or who
    env["lead"] = warp == 0
    pending = None  # (barrier) of an expect_tx whose copies are being issued
    last_read = None

    def flush():
        nonlocal pending
        if pending is not None:
            block.arrive(pending)
            pending = None

    def statement(ln: str):
        nonlocal pending, last_read
        if not ln.startswith("cvl_tma"):
            flush()
        read = _READ.search(ln)
        if not read:
            last_read = None
        if (m := _FLAG_DECL.match(ln)):
            value = m.group(2) or "0"
            env[m.group(1)] = _BOOL[value] if value in _BOOL else int(value)
            return
        if (m := _FLAG_SET.match(ln)):
            env[m.group(1)] = _BOOL[m.group(2)] if m.group(2) in _BOOL else int(m.group(2))
            return
        if _VOTE.match(ln):
            yield from block.meet(group, warp, "vote")
            mine = env["votes"] = env.get("votes", 0) + 1
            drawn = block.votes.setdefault(group, [])
            if len(drawn) < mine:
                drawn.append(int(votes.random() < 0.5))
            env["cvl_vote"] = drawn[mine - 1]
            return
        if (m := _OWN.match(ln)):
            env["cvl_own"] = _c(m.group(1) or m.group(2), {**env, "cvl_mine": block.mine})
            return
        if (m := _PHASE.match(ln)):
            env["cvl_ph"] = _c(m.group(1), env)
            return
        if (m := _ROUND.match(ln)):
            env["cvl_round"] = _c(m.group(1), env)
            return
        if (m := _STEP.match(ln)):
            env["t"] += int(m.group(1) or 1)
            return
        if (m := _TILE.match(ln)):
            env["tk"] = _c(m.group(1), env)
            return
        if (m := _AGAIN.match(ln)):  # every consumer thread's barrier: all of them get the block's verdict
            assert int(m.group(1)) == 128 * block.k.groups, ln
            yield from block.meet("consumers", env["wg"] * block.warps + warp, "verdict", block.k.groups * block.warps)
            env["cvl_again"] = int(block.redo)
            return
        if ln == "cvl_redo = cvl_again;":
            block.verdict = env["cvl_again"]
            return
        if (m := _PLAN_ADD.match(ln)):
            env["cvl_plan"] |= env["cvl_vote"] << int(m.group(1))
            return
        if _PLAN_NEXT.match(ln):
            env["cvl_skip"] = env["cvl_plan"] & 1
            return
        if ln == "cvl_plan >>= 1;":
            env["cvl_plan"] >>= 1
            return
        if (m := _PUBLISH.match(ln)):
            tile = _c(m.group(1), env)
            block.published[(tile % int(m.group(2)), env["wg"])] = (tile, env["cvl_vote"])
            return
        if (m := _GONE.match(ln)):
            env["cvl_gone"] = 0
            if _c(m.group(1), env):
                tile, ring = _c(m.group(2), env), int(m.group(3))
                seen = [block.published.get((tile % ring, w)) for w in range(int(m.group(5)))]
                assert all(x is not None and x[0] == tile for x in seen), (
                    f"{who}: the votes on tile {tile} read as {seen}: not yet written, or overwritten")
                env["cvl_gone"] = int(all(x[1] for x in seen))
            return
        if ln == "cvl_wgmma_fence();":  # a product follows: the warpgroup's warps issue it together
            yield from block.meet(group, warp, "wgmma")
            return
        m = _IF_LINE.match(ln)
        if m:
            if _c(m.group(1), env):
                yield from statement(m.group(2))
            return
        if (m := _STAGE.match(ln)):
            env["stage"], env["use"] = _c(m.group(1), env) % int(m.group(2)), _c(m.group(3), env) // int(m.group(4))
            return
        if (m := _WAIT.match(ln)):
            bar = _c(m.group(1), env) if m.group(1) else 0
            parity = _c(m.group(2), env)
            while not block.passed(bar, parity):
                block.waiting[who] = f"{ln} (t={env.get('t')}, work item {env.get('it')})"
                yield "wait"
            return
        if (m := _ARRIVE.match(ln)):
            bar = _c(m.group(1), env)
            if getattr(block.k, "listed", False) and bar == block.k.verdict:
                assert block.verdict is not None, f"{who}: the verdict's barrier arrived at before the verdict was written"
                block.arrive(bar)
                return
            if bar >= 1 + 2 * s:  # an empty barrier: this consumer is done with the slot's tile
                kind = "q" if bar == 1 + 4 * s else "k" if bar < 1 + 3 * s else "v"
                slot = 0 if kind == "q" else (bar - 1 - 2 * s) % s
                block.busy[(kind, slot)].discard(group)
            block.arrive(bar)
            return
        if (m := _EXPECT.match(ln)):
            pending = _c(m.group(1), env) if m.group(1) else 0
            return
        if (m := _COPY.match(ln)):
            kind = m.group(1)[1]
            slot = 0 if kind == "q" else _c(m.group(2).split(" * ")[0], env)
            assert not block.busy[(kind, slot)], f"{who}: {kind} slot {slot} overwritten while read by {block.busy[(kind, slot)]}"
            block.slots[(kind, slot)] = (env["it"], None if kind == "q" else env.get("tk", env["t"]))
            return
        if read:
            kind, slot = read.group(1), _c(read.group(2), env)
            # the product reads its operands once, issued by all the warps (they met at its fence): warp 0 stands
            # for the warpgroup
            if env["lead"] and last_read != (kind, slot):  # the first wgmma of a product: the next tile of this kind
                want = (env["it"], block.sequence[reads[kind]])
                got = block.slots[(kind, slot)]
                assert got == want, f"{who}: {kind} tile {want} read from slot {slot}, which holds {got}"
                if kind == "k":  # S = Q K^T reads Q too
                    qgot = block.slots[("q", 0)]
                    assert qgot == (env["it"], None), f"{who}: Q of work item {env['it']} read, the buffer holds {qgot}"
                    block.busy[("q", 0)].add(group)
                block.busy[(kind, slot)].add(group)
                reads[kind] += 1
            last_read = (kind, slot)
            return
        if (m := _NAMED.match(ln)):
            nid = _c(m.group(3), env) if m.group(2) == "%0" else int(m.group(2))
            state = block.named.setdefault(nid, [0, 0])
            state[0] += 1
            block.version += 1
            gen = state[1]
            if state[0] == 2 * block.warps:
                state[0], state[1] = 0, gen + 1
            if m.group(1) == "sync":
                while state[1] == gen:
                    block.waiting[who] = f"{ln} (t={env.get('t')}, work item {env.get('it')})"
                    yield "wait"
            return
        assert not any(e in ln for e in _EVENTS), f"a line of an unknown shape: {ln}"

    def run(nodes: list):
        for node in nodes:
            if isinstance(node, str):
                yield from statement(node)
                yield None
                continue
            head, body = node
            if (m := _FOR_ITEMS.match(head)):
                for i, it in enumerate(block.items):
                    env.update(i=i, it=it, g=i * int(m.group(2)))
                    reads["k"] = reads["v"] = 0
                    yield from run(body)
            elif (m := _FOR_T.match(head)):
                for t in range(_c(m.group(1), env), _c(m.group(2), env), int(m.group(3) or 1)):
                    env["t"] = t
                    yield from run(body)
                    if head == _UNREAD:  # its K and V counted as read
                        reads["k"] += 1
                        reads["v"] += 1
                flush()
            elif (m := _FOR_OPEN.match(head)):
                env["t"] = _c(m.group(1), env)
                while env["t"] < _c(m.group(2), env):
                    yield from run(body)
                flush()
            elif head == "{" or head.startswith("if (threadIdx.x == 0)"):
                yield from run(body)
            elif (m := _IF_DATA.match(head)):
                if _c(m.group(1), env):
                    yield from run(body)
            elif (m := _IF_FLAG.match(head)):
                then, other = _split_else(body)
                if m.group(1) == "cvl_redo":  # the producer reads the verdict
                    assert block.verdict is not None, f"{who}: the verdict read before the consumers wrote it"
                    env["cvl_redo"] = block.verdict
                taken = bool(env[m.group(1)])
                skipped = m.group(1) == "cvl_skip" and taken
                if skipped:  # tile t's K is not read; its V neither, after the last tile's product
                    reads["k"] += 1
                yield from run(then if taken else other)
                if skipped:
                    reads["v"] += 1
            else:  # arithmetic: no barrier, copy or product may hide in it
                flat = repr(body)
                assert not any(e in flat for e in _EVENTS), f"events inside a skipped block: {head}"
        flush()

    return run(tree)


def simulate(k, seed: int, block_index: int = 0, warps: int = 4) -> int:
    """Run block ``block_index`` of kernel ``k`` (a rendered ``_WsAttention``) to the end in a random
    interleaving, each consumer warpgroup as ``warps`` actors (1: the warpgroup as one); returns the steps
    taken. Raises AssertionError on a deadlock or a wrong read or write."""
    grid = min(k.items, k.blocks) if k.persistent else k.items
    items = list(range(block_index, k.items, grid)) if k.persistent else [block_index]
    block = Block(k, items)
    block.warps = warps
    rng = random.Random(seed)
    listed = {}
    if getattr(k, "listed", False):
        block.draw(rng)
        listed = {"cvl_tiles": block.entries, "cvl_cnt": len(block.tiles), "fold_flip": int(rng.random() < 0.2)}
    producer_tree = _blocks(k.producer())
    consumer_tree = _blocks(k.consumer())
    actors = {"producer": _actor(block, producer_tree, {"it": items[0], "i": 0, "g": 0, **listed}, "producer", {})}
    for wg in range(k.groups):
        group, votes = f"consumer {wg}", random.Random(rng.random())
        for w in range(warps):
            who = f"{group} warp {w}" if warps > 1 else group
            actors[who] = _actor(block, consumer_tree, {"it": items[0], "i": 0, "g": 0, "wg": wg, **listed}, who,
                                 {"k": 0, "v": 0}, votes, group, w)
    steps, blocked = 0, {}  # thread -> block.version when it last found its barrier closed
    while actors:
        name = rng.choice(sorted(actors))
        try:
            state = next(actors[name])
        except StopIteration:
            del actors[name]
            blocked.pop(name, None)
            continue
        steps += 1
        if state == "wait":
            blocked[name] = block.version
            stuck = [n for n in actors if blocked.get(n) == block.version]
            assert len(stuck) < len(actors), (f"deadlock: every thread waits (barrier phases {block.phases}): "
                                              + "; ".join(f"{n} at {block.waiting.get(n)}" for n in sorted(stuck)))
        else:
            blocked.pop(name, None)
    return steps
