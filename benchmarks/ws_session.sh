#!/bin/bash
# Session 22's device calls for the warp-specialised attention kernel: its GPU tests, the A/B, and the
# `attention` example's cuda regression case recorded afresh (its kernel changed) and replayed.
set -u
python3 -m pytest -p cuvil_dsl.testing.plugin -m gpu -q -p no:cacheprovider tests/gpu/test_codegen_gpu.py -k "attention" 2>&1 | tail -25 | tee "$OUT/ws-tests.log"
python3 benchmarks/ab_attention_full.py --only default --only ws --rounds ${ROUNDS:-3} 2>&1 | tail -45
if [ -n "${RECORD:-}" ]; then
    rm -rf /tmp/r && mkdir -p /tmp/r/regression/cuda
    python3 regression/record_all.py --backend cuda --dest /tmp/r/regression/cuda $RECORD 2>&1 | tail -5
    python3 -m pytest -p cuvil_dsl.testing.plugin --rootdir /tmp/r /tmp/r/regression/cuda -q -p no:cacheprovider 2>&1 | tail -3
    tar czf "$OUT/recorded.tar.gz" -C /tmp/r/regression/cuda .
fi
