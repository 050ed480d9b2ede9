#!/usr/bin/env bash
# The GPU benchmarks of #12 on a lent machine (the device tool: one H100, Python 3.12 with torch, transformers, timm,
# peft, pyarrow... but not zarr, numcodecs, faiss, colour-science or rapidfuzz, and no package index).
#
# Here, once (downloads those packages as Python 3.12 wheels into .whl/, which git ignores; ~33 MB):
#     bash benchmarks/gpu.sh wheels
# There, one device call per step (carry: [".whl"]; each step ends well inside the 10-minute limit of a call):
#     bash benchmarks/gpu.sh cache            # extraction vs forward-only, SigLIP-so400m@384 (random weights), 10240 images
#     bash benchmarks/gpu.sh fingerprint-a    # fingerprint at SigLIP shapes, 15.6K images per ability: 7 abilities...
#     bash benchmarks/gpu.sh fingerprint-b    # ... and the other 7 (two calls: each builds its dataset first)
# Each writes its JSON and log under $OUT (the tool's folder that comes back; ./gpu-out when unset).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
PLATFORMS="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
# the versions CI tests with (pip list in .ci/run's venv, 2026-11-25)
WHEELS="zarr==3.1.6 numcodecs==0.16.6 donfig==0.8.1.post1 google-crc32c==1.9.0 colour-science==0.4.7
        rapidfuzz==3.14.6 faiss-cpu==1.15.1"
HALF_A=localization,counting,spatial,orientation,abs_depth,rel_depth,color
HALF_B=texture,emotion,action,fine_grained,recognition,ocr,scene

setup() {  # the carried wheels, and this checkout, importable
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/device.txt"
    python3 -c "import torch, ava; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" \
        | tee -a "$OUT/device.txt"
}

case "${1:-}" in
wheels)
    mkdir -p .whl
    # shellcheck disable=SC2086
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        $PLATFORMS --platform any -d .whl $WHEELS
    du -sh .whl
    ;;
cache)
    setup
    python3 benchmarks/bench_cache.py --device cuda --dtype bf16 --models siglip:random --codecs fp16 \
        --images 10240 --batch-size 64 --shard-size 256 --num-workers 12 --repeats 1 --error-images 4 \
        --json "$OUT/bench_cache_gpu.json" 2>&1 | tee "$OUT/bench_cache_gpu.log"
    ;;
fingerprint-a | fingerprint-b)
    setup
    half=$HALF_A
    [ "$1" = fingerprint-b ] && half=$HALF_B
    python3 benchmarks/bench_fingerprint.py --device cuda --modes fingerprint --tokens 729 --dim 1152 \
        --samples 15600 --abilities "$half" --json "$OUT/bench_$1.json" 2>&1 | tee "$OUT/bench_$1.log"
    ;;
*)
    echo "usage: bash benchmarks/gpu.sh wheels|cache|fingerprint-a|fingerprint-b" >&2
    exit 2
    ;;
esac
