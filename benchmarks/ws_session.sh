#!/bin/bash
# Session 22's device call for the warp-specialised attention kernel: its GPU tests, then the A/B.
set -u
python3 -m pytest -p cuvil_dsl.testing.plugin -m gpu -q -p no:cacheprovider tests/gpu/test_codegen_gpu.py -k "fused_attention_tunings" -x 2>&1 | tail -25 | tee "$OUT/ws-tests.log"
python3 benchmarks/ab_attention_full.py --only default --only ws --rounds ${ROUNDS:-3} 2>&1 | tail -60
