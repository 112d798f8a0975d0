#!/bin/bash
# The GPU machine's short calls, by name: STEPS (space-separated) picks what runs, each writing under $OUT.
# Run from the repository root after the device README's install line, e.g.
#     STEPS="tests abattn" ONLY="default ws" bash benchmarks/device_steps.sh
# (The whole session's run, tests, examples, the bench and budgets, is benchmarks/gpu_session.py.)
#   tests   GPU tests of tests/gpu/test_codegen_gpu.py matching TESTS_K (default: the attention and GEMM kernels)
#   abattn  benchmarks/ab_attention_full.py on the variants whose labels contain a word of ONLY (default "default"),
#           ROUNDS interleaved rounds (default 3), on the specs of CASES (default: its three)
#   record  the cuda regression cases whose generated code changed, and nothing else, re-recorded
#           (regression/update_code.py) into $OUT/rerecorded.tar.gz: `tar xzf` it in regression/; RECORD_FLAGS=--layout
#           after a fusion change (a changed arena accepted when every input and result is the same bits)
#   wsgemm  the GEMM's warp-specialised kernel (trap outlined, inlined, with multicast) against the plain one,
#           ab_wgmma.py, rotated rounds at 4096^3
#   ncu     Nsight Compute's launch statistics, speed of light, occupancy and warp states of cuBLAS's GEMM, PyTorch's
#           addmm + gelu and ours, then of PyTorch's fused attention and ours (benchmarks/ncu_gemm.py)
#   ncufull ncu's full set of PyTorch's fused attention and ours with 4 and 2 consumer warpgroups
#   ncusrc  per-instruction counters (stall samples) of our attention kernel with CONSUMERS consumer warpgroups (default
#           "4 2"), each alone in its process (its fourth launch), summarised by benchmarks/ncu_source.py
#   tlb     benchmarks/flush_probe.py --tlb on TLB_SPECS (default: attention scores and the elementwise chain): do the
#           flushed samples' extra microseconds come from address translation?
#   skipprobe  benchmarks/skip_probe.py on PROBE_SHAPES with PROBE_VARIANTS (defaults: the shapes where 4 consumers hung,
#           off,on,never), PROBE_RUNS launches each (default 200)
#   skiptests  the GPU tests of TESTS_K (default: attention) with SKIP=SKIP (default "'list'", as in the code; True: the vote; False: every tile)
#   skiprecord  `record` with SKIP=SKIP (every cuda case replayed under it: the same results, bits and snapshots
#           required) into $OUT/rerecorded-skip.tar.gz
#   skipsan  `cuvil-dsl run --sanitize TOOL` for each of SAN_TOOLS (default: synccheck memcheck) on the causal pipeline
#           at SAN_SHAPE (default B=4, M=N=1024) with ATTENTION_TUNING SAN_TUNING (default skip on, 4 consumers)
#   skipab  ab_attention_full.py's default and "skip" variants on the causal shape, ROUNDS rounds
#   skipbench  the causal bench (SKIP=SKIP) against PyTorch's SDPA, torch.compile and Triton
#   bench   `cuvil-dsl bench --quick` of BENCH_SPECS (default: the attention benchmarks) against BASELINES
#   wide    session 36's attention band in clusters of CTAs of 8 tiles: its GPU tests (-k eight_tiles) and ab_attention.py
#           --no-variants --only wide
#   widebench  `cuvil-dsl bench --quick` of attention_f16 and its 4096-key shape by default and under that switch, the
#           second run compared with the first (`--compare`), into $OUT/widebench.tgz
#   refill  session 36's GEMM loop refilled before each step's wait: its GPU tests (-k refill_first), ab_wgmma.py
#           --library-modes refilled at 4096^3 (ROUNDS rotated rounds, default 6), the GEMM bench under the switch
#   each    `cuvil-dsl bench --quick --json` of each benchmarks/NAME.yaml of EACH_SPECS (default: issue 7's, the targets
#           first) in its own call while under EACH_LIMIT seconds (default 470), then one report of them all
#           (`bench --from`) in bench.md and bench.png, compared with EACH_COMPARE (default: the last whole H200 run,
#           session 24's; empty: no comparison); all of it in $OUT/each.tgz
set -u
for step in ${STEPS:-tests}; do
    echo "== $step $(date -u +%H:%M:%S)"
    case $step in
    tests)
        timeout 400 python3 -m pytest -p cuvil_dsl.testing.plugin -m gpu -q -p no:cacheprovider \
            tests/gpu/test_codegen_gpu.py -k "${TESTS_K:-attention or wgmma or gemm}" 2>&1 | tail -25 | tee "$OUT/gpu-tests.log" ;;
    abattn)
        only=(); for word in ${ONLY:-default}; do only+=(--only "$word"); done
        cases=(); for spec in ${CASES:-}; do cases+=(--case "$spec"); done
        timeout 500 python3 benchmarks/ab_attention_full.py "${only[@]}" "${cases[@]}" --rounds ${ROUNDS:-3} 2>&1 | tail -60 ;;
    record)
        timeout 300 python3 regression/update_code.py --backend cuda ${RECORD_FLAGS:-} --archive "$OUT/rerecorded.tar.gz" 2>&1 | tail -8 ;;
    wsgemm)
        timeout 300 python3 benchmarks/ab_wgmma.py --configs 128x256s4p1 --no-sass --library-modes persistent \
            --timed 4096x4096x4096 --rounds ${ROUNDS:-4} --samples 50 2>&1 | tee "$OUT/ab_wgmma.md" | tail -30 ;;
    ncu)
        for what in gemm attention; do
            timeout 240 ncu --section LaunchStats --section SpeedOfLight --section Occupancy --section WarpStateStats \
                python3 benchmarks/ncu_gemm.py $what > "$OUT/ncu-$what.txt" 2>&1
            grep -E "^  [a-zA-Z_].*\(|Block Size|Grid Size|Cluster Size|Registers Per|Dynamic Shared|Duration|Compute \(SM\) Throughput|Achieved Occupancy|Warp Cycles Per Issued" \
                "$OUT/ncu-$what.txt" | head -120
        done ;;
    ncufull)
        timeout 420 ncu --set full -k regex:"cudnn|cvl_forward" python3 benchmarks/ncu_gemm.py attention groups=2 \
            > "$OUT/ncu-attention-full-set.txt" 2>&1
        grep -E "^  [a-zA-Z_].*\(|Duration|Warp Cycles Per Issued|Issued Ipc|No Eligible|Executed Instructions  " \
            "$OUT/ncu-attention-full-set.txt" | head -80 ;;
    ncusrc)
        for g in ${CONSUMERS:-4 2}; do
            timeout 200 ncu --section SourceCounters --section WarpStateStats -k regex:cvl_forward --launch-skip 3 \
                --launch-count 1 -f -o /tmp/src$g python3 benchmarks/ncu_gemm.py attention groups=$g alone > /dev/null 2>&1
            ncu --import /tmp/src$g.ncu-rep --page source --print-source sass --csv > "$OUT/ncu-attention-source-$g.csv"
            python3 benchmarks/ncu_source.py "$OUT/ncu-attention-source-$g.csv" --elements 134217728 \
                --listing "$OUT/ncu-attention-source-$g.txt" 2>&1 | head -40
        done ;;
    tlb)
        timeout 400 python3 benchmarks/flush_probe.py --tlb --rounds ${ROUNDS:-3} \
            ${TLB_SPECS:-benchmarks/attention_f16.yaml benchmarks/elementwise_f32.yaml} 2>&1 | tail -30 ;;
    skipprobe)
        timeout 360 python3 benchmarks/skip_probe.py ${PROBE_SHAPES:-32,2048,2048,auto 4,1024,1024,p4:4 4,1024,1024,4 32,2048,2048,2} \
            --variants ${PROBE_VARIANTS:-off,on,never} --runs ${PROBE_RUNS:-200} \
            --timeout 40 2>&1 | tee "$OUT/skip_probe.txt" | tail -60 ;;
    skiptests)
        timeout 400 python3 benchmarks/bench_mode.py cuda_attention.SKIP=${SKIP:-"'list'"} -- \
            -m pytest -p cuvil_dsl.testing.plugin -m gpu -q -p no:cacheprovider tests/gpu/test_codegen_gpu.py \
            -k "${TESTS_K:-attention}" 2>&1 | tail -25 | tee "$OUT/gpu-tests-skip.log" ;;
    skiprecord)
        timeout 300 python3 benchmarks/bench_mode.py cuda_attention.SKIP=${SKIP:-"'list'"} -- \
            regression/update_code.py --backend cuda ${RECORD_FLAGS:-} --archive "$OUT/rerecorded-skip.tar.gz" 2>&1 | tail -8 ;;
    skipsan)
        mkdir -p /tmp/skipsan && cp benchmarks/shapes/pipelines.cuvil /tmp/skipsan/p.cuvil
        read -r b m n <<< "${SAN_SHAPE:-4 1024 1024}"
        printf "pipeline: p.cuvil\nentry: attention_full_f16_causal\nshapes: {B: $b, M: $m, N: $n, D: 64}\ninputs:\n  qpos: {init: arange}\n  kpos: {init: arange}\ncheck: {rtol: 4.0e-3, atol: 4.0e-3}\nrun: {warmup: 1, iterations: 2}\n" \
            > /tmp/skipsan/s.yaml
        for tool in ${SAN_TOOLS:-synccheck memcheck}; do
            echo "-- $tool"
            CUVIL_BENCH_SWITCHES="cuda_attention.ATTENTION_TUNING=${SAN_TUNING:-{'skip': True, 'groups': 4\}}" \
                PYTHONPATH="$PWD/benchmarks/switch_site:${PYTHONPATH:-}" timeout 240 python3 -m cuvil_dsl run \
                /tmp/skipsan/s.yaml --sanitize $tool 2>&1 | tail -40 | tee "$OUT/skipsan-$tool.txt"
        done ;;
    skipab)
        timeout 300 python3 benchmarks/ab_attention_full.py \
            --only default --only skip --case benchmarks/shapes/attention_full_f16-causal.yaml --rounds ${ROUNDS:-2} 2>&1 | tail -30 ;;
    skipbench)
        timeout 300 python3 benchmarks/bench_mode.py cuda_attention.SKIP=${SKIP:-"'list'"} -- bench \
            benchmarks/shapes/attention_full_f16-causal.yaml --quick --baselines torch,torch_compile,triton \
            --plot "$OUT/bench-causal.png" 2>&1 | tee "$OUT/bench-causal.md" | tail -30 ;;
    bench)
        timeout 400 python3 -m cuvil_dsl bench ${BENCH_SPECS:-benchmarks/attention_full_f16.yaml benchmarks/shapes/attention_full_f16-d128.yaml} \
            --quick --baselines ${BASELINES:-torch,triton} --plot "$OUT/bench.png" 2>&1 | tee "$OUT/bench.md" | tail -30 ;;
    wide)
        # session 36's clusters of CTAs of 8 tiles (ROW_BAND_TUNING "cluster_tiles" 8): its GPU tests, then the A/B
        # against the default (ab_attention.py: the default timed before and after it, on its five cases)
        timeout 240 python3 -m pytest -p cuvil_dsl.testing.plugin -m gpu -q -p no:cacheprovider tests/gpu/test_codegen_gpu.py \
            -k eight_tiles 2>&1 | tail -12 | tee "$OUT/gpu-tests-wide.log"
        timeout 320 python3 benchmarks/ab_attention.py --no-variants --only wide 2>&1 | tail -25 ;;
    widebench)
        # the same in the bench's method: attention_f16 and the 4096-key shape (one pass in clusters of 8 under the
        # switch, two-pass bands by default), by default and under the switch, the second compared with the first
        work=$(mktemp -d)
        specs="benchmarks/attention_f16.yaml benchmarks/shapes/attention_f16-n4096.yaml"
        timeout 270 python3 -m cuvil_dsl bench $specs --quick --json > "$work/default.json" 2> "$work/default.err"
        timeout 270 python3 benchmarks/bench_mode.py 'cuda_matmul.ROW_BAND_TUNING={"cluster_tiles": 8}' -- bench $specs \
            --quick --json > "$work/wide.json" 2> "$work/wide.err"
        python3 -m cuvil_dsl bench --from "$work/wide.json" --compare "$work/default.json" --plot "$work/bench-wide.png" \
            > "$work/bench-wide.md" 2>&1
        tar czf "$OUT/widebench.tgz" -C "$work" .
        head -12 "$work/bench-wide.md"; grep -A8 "^Compared with" "$work/bench-wide.md" ;;
    refill)
        # session 36's GEMM main loop refilled before each step's wait (cuda_wgmma.REFILL_FIRST): its GPU tests, the
        # A/B against the default in rotated rounds at 4096^3, then the bench under the switch
        timeout 200 python3 -m pytest -p cuvil_dsl.testing.plugin -m gpu -q -p no:cacheprovider tests/gpu/test_codegen_gpu.py \
            -k refill_first 2>&1 | tail -8 | tee "$OUT/gpu-tests-refill.log"
        timeout 240 python3 benchmarks/ab_wgmma.py --configs 128x256s4p1 --no-sass --library-modes refilled \
            --timed 4096x4096x4096 --rounds ${ROUNDS:-6} --samples 50 2>&1 | tee "$OUT/ab_wgmma-refill.md" | tail -20
        timeout 150 python3 benchmarks/bench_mode.py REFILL_FIRST=True -- bench benchmarks/gemm_gelu_f16.yaml --quick \
            --plot "$OUT/bench-refill.png" 2>&1 | tee "$OUT/bench-refill.md" | tail -16 ;;
    each)
        # one bench call a spec, so that a call's time limit keeps every spec already measured; then one report.
        # The device tool brings back few files a call: the runs go into $OUT/each.tgz, rewritten after each spec.
        work=$(mktemp -d)
        nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
            > "$work/device.txt" 2>&1
        runs=()
        for name in ${EACH_SPECS:-attention_f16 gemm_gelu_f16 elementwise_f32 attention_full_f16 softmax_f16 layernorm_f16 softmax_f32 small_graph}; do
            if [ $SECONDS -gt ${EACH_LIMIT:-470} ]; then echo "$name: not run (${EACH_LIMIT:-470} s spent)"; continue; fi
            started=$SECONDS
            timeout 300 python3 -m cuvil_dsl bench "benchmarks/$name.yaml" --quick --json > "$work/bench-$name.json" \
                2> "$work/bench-$name.err"
            echo "$name: rc=$? in $((SECONDS - started)) s"
            python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$work/bench-$name.json" 2>/dev/null \
                && runs+=(--from "$work/bench-$name.json")
            tar czf "$OUT/each.tgz" -C "$work" .
        done
        base=${EACH_COMPARE-benchmarks/results/2026-12-02-h200-session24-bench.json}
        [ ${#runs[@]} -gt 0 ] && python3 -m cuvil_dsl bench "${runs[@]}" --plot "$work/bench.png" \
            ${base:+--compare "$base"} > "$work/bench.md"
        tar czf "$OUT/each.tgz" -C "$work" .
        head -14 "$work/bench.md"; grep -A14 "^Compared with" "$work/bench.md" ;;
    *)
        echo "unknown step $step" >&2; exit 2 ;;
    esac
done
