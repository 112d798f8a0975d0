#!/bin/bash
# Session 23's device calls: STEPS (space-separated) picks what runs, each with its output under $OUT.
#   tests  the GPU tests of the attention and GEMM kernels (their tuning variants included)
#   wsgemm the GEMM's warp-specialised kernel with its barrier wait's trap outlined (the default now) against
#          the trap inlined and the plain kernel (ab_wgmma.py, rotated rounds, 4096^3)
#   ncu    Nsight Compute's launch statistics, speed of light and occupancy of cuBLAS's GEMM, PyTorch's addmm + gelu
#          and ours (benchmarks/ncu_gemm.py), then of PyTorch's fused attention and ours
#   ncufull ncu's full set (stall reasons, instruction mix, scheduler statistics) of PyTorch's fused attention and
#          ours with 4 and 2 consumer warpgroups
#   ncusrc per-instruction counters (stall samples) of our attention kernel with 4 consumers (launch 2 of ours) and
#          with 2 (launch 3), exported as CSV for benchmarks/ncu_source.py
#   bench  `cuvil-dsl bench` of the attention benchmarks (the persistent grid is their default since session 22)
set -u
for step in ${STEPS:-tests wsgemm bench}; do
    echo "== $step $(date -u +%H:%M:%S)"
    case $step in
    tests)
        timeout 300 python3 -m pytest -p cuvil_dsl.testing.plugin -m gpu -q -p no:cacheprovider \
            tests/gpu/test_codegen_gpu.py -k "${TESTS_K:-attention or wgmma or gemm}" 2>&1 | tail -25 | tee "$OUT/gpu-tests.log" ;;
    wsgemm)
        timeout 300 python3 benchmarks/ab_wgmma.py --configs 128x256s4p1 --no-sass --library-modes persistent \
            --timed 4096x4096x4096 --rounds ${ROUNDS:-4} --samples 50 2>&1 | tee "$OUT/ab_wgmma.md" | tail -30 ;;
    ncu)
        for what in gemm attention; do
            timeout 240 ncu --section LaunchStats --section SpeedOfLight --section Occupancy --section WarpStateStats \
                python3 benchmarks/ncu_gemm.py $what > "$OUT/ncu-$what.txt" 2>&1
            grep -E "^  [a-zA-Z_].*\(|Block Size|Grid Size|Cluster Size|Registers Per|Shared Memory Config|Dynamic Shared|Static Shared|Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Waves Per SM|Theoretical Occupancy" "$OUT/ncu-$what.txt" | head -120
        done ;;
    ncufull)
        timeout 420 ncu --set full -k regex:"cudnn|cvl_forward" python3 benchmarks/ncu_gemm.py attention groups=2 \
            > "$OUT/ncu-attention-full-set.txt" 2>&1
        grep -E "^  [a-zA-Z_].*\(|Duration|Warp Cycles Per Issued|Issued Ipc|No Eligible|Stall|Executed Instructions  " \
            "$OUT/ncu-attention-full-set.txt" | head -80 ;;
    ncusrc)
        for pick in "4 2" "2 3"; do
            set -- $pick
            timeout 200 ncu --section SourceCounters --section WarpStateStats -k regex:cvl_forward --launch-skip $2 \
                --launch-count 1 -f -o /tmp/src$1 python3 benchmarks/ncu_gemm.py attention groups=2 > /dev/null 2>&1
            ncu --import /tmp/src$1.ncu-rep --page source --print-source sass --csv > "$OUT/ncu-attention-source-$1consumers.csv"
            python3 benchmarks/ncu_source.py "$OUT/ncu-attention-source-$1consumers.csv" --elements 134217728 \
                --listing "$OUT/ncu-attention-source-$1consumers.txt" 2>&1 | head -60
        done ;;
    bench)
        timeout 400 python3 -m cuvil_dsl bench ${BENCH_SPECS:-benchmarks/attention_full_f16.yaml benchmarks/shapes/attention_full_f16-d128.yaml} \
            --quick --baselines ${BASELINES:-torch,triton} --plot "$OUT/bench.png" 2>&1 | tee "$OUT/bench.md" | tail -30 ;;
    esac
done
