#!/usr/bin/env bash
# Every headline GPU figure of ava in ONE device call, <= 9 minutes on an H100 or an H200 after the
# machine's start (a session has 15 minutes of device time in all).
#
# Once, here (downloads the Python 3.12 wheels the GPU image lacks into .whl/, which git ignores; ~40 MB):
#     bash benchmarks/gpu.sh wheels
# The device call (the tool's run; its image has torch 2.11 and transformers 5.17, not CI's versions):
#     command:   OUT=$OUT bash benchmarks/gpu.sh run
#     carry:     [".whl"]          (the wheels above, beside the checkout; nothing else is needed)
#     timeout_s: 540               (the stages' own limits add up to 525 s; the rest is the wheels' install)
# Here, the same four stages on this CPU at small sizes, the same files (<= 5 minutes):
#     OUT=DIR bash benchmarks/gpu.sh run --dry-run
# After a fix, the stages it touches again, the rest skipped (a second call must fit the session's 15 minutes of
# device time, which the first call and two machine starts have mostly spent; the llm stage alone is ~4 minutes):
#     OUT=$OUT bash benchmarks/gpu.sh run --only llm            (names: preflight, llm, cache, fingerprint)
#
# Stages, in order of value, each under its own `timeout`, each writing its JSON and log to $OUT as soon as it ends
# (a stage that runs out of time leaves the earlier stages' files, and the next stage still runs). Inside a stage
# every part is time-boxed too (--budget, a little under the stage's limit): it runs until its share of what is left,
# then reports what it measured, and the stage's JSON is rewritten after each part, so no stage ends with nothing:
#     1. preflight.json  (100 s)  device, versions, varlen attention at real shapes, one Qwen2-0.5B layer (eager),
#                                 the tests marked gpu before the layer (CI skips them: no CUDA there); the layer
#                                 only if 15 s are left (the llm stage times the whole model)
#     2. llm.json        (175 s)  the LLM head at real shapes: cached path, then the online (full-image) path, each
#                                 its share: samples/s, tokens/s, MFU, data wait, compile warm-up, and the steady
#                                 rate (less a fit's start); 8 more cached steps under torch.profiler (kernels/step,
#                                 device busy, time by kernel kind, top kernels, the device's idle stretches, the host's
#                                 CUDA calls: what to do about MFU); one packed batch's forward + backward launched
#                                 as the loop launches it, then replayed from a CUDA graph (the most graphs could
#                                 take off a step), and the loop's first 24 batches trained from graphs over length
#                                 buckets beside the loop's steady step; then a second run's warm-up in a fresh
#                                 process (empty inductor/Triton caches, $AVA_HOME's artifacts). The call's output
#                                 ends with a table of these figures against their targets (gpu_summary.py)
#     3. cache.json      (125 s)  forward-only, decode-only and extraction, SigLIP-so400m@384 (random weights), bf16;
#                                 JPEGs decoded on the GPU (nvJPEG) vs by the workers: both rates, the features' distance
#                                 and the share of rows far off (device_rows_off: 0 expected; a stream race once gave 4%);
#                                 the main loop's time split: waiting for the workers, decoding on the device, the rest
#     4. fingerprint.json (125 s) an ability's token read from a real fp16 cache (256 SigLIP-sized rows) at each
#                                 placement (on the GPU twice: the first read pins its staging; host-staged, host), read
#                                 where held vs through host memory (then copied whole: plainly as before, and in
#                                 pinned chunks as placing does now): GB/s, peak host memory, the
#                                 reader threads' seconds by phase; then a 14-ability fingerprint at SigLIP shapes at 2%
#                                 and 4% of each ability's real size, one head at a time, scaled to the real size, and
#                                 whether the two scales agree (scaling_check); then 3 of the 4% abilities again from a
#                                 real fp16 Zarr cache of the same rows, read as a user's cache is (the next ability
#                                 read onto the GPU while the heads fit): their time outside the fits beside the
#                                 stand-in's, each token read's GB/s and the time it blocked, one head at a time, then
#                                 two at once (the default on a GPU). (The probes' step alone:
#                                 benchmarks/bench_probe_steps.py, measured once, no longer run here.)
# Each stage prints a line as each part ends (a stage cut off by its limit still says how far it got).
# Each JSON records the device, the versions and which paths ran (attention, compiled, where features were held).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
PLATFORMS="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
# the versions CI tests with (pip list in .ci/run's venv), for the packages the GPU image does not have
WHEELS="zarr==3.1.6 numcodecs==0.16.6 donfig==0.8.1.post1 google-crc32c==1.9.0 colour-science==0.4.7
        rapidfuzz==3.14.6 faiss-cpu==1.15.1"

STAGE_NAMES="preflight llm cache fingerprint"
ONLY=""  # the stages to run (--only), all when empty

stage() {  # NAME SECONDS COMMAND...: run under a time limit, log to $OUT/NAME.log, say how it ended
    local name=$1 limit=$2
    shift 2
    if [ -n "$ONLY" ] && [[ ",$ONLY," != *",$name,"* ]]; then
        echo "== $name: skipped (--only $ONLY)"
        echo "{\"stage\": \"$name\", \"skipped\": true}" >>"$STAGES"
        return
    fi
    local t0=$SECONDS
    echo "== $name (limit ${limit}s)"
    timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    tail -n 25 "$OUT/$name.log"
    echo "== $name: exit $rc after $((SECONDS - t0)) s$([ $rc -eq 124 ] && echo ' (timed out)')"
    echo "{\"stage\": \"$name\", \"exit\": $rc, \"seconds\": $((SECONDS - t0))}" >>"$STAGES"
}

run() {
    local dry=""
    while [ $# -gt 0 ]; do
        case "$1" in
        --dry-run) dry=--dry-run ;;
        --only)
            ONLY=${2:-}
            local n
            for n in ${ONLY//,/ }; do
                [[ " $STAGE_NAMES " == *" $n "* ]] || { echo "gpu.sh: --only: no stage '$n' ($STAGE_NAMES)" >&2; exit 2; }
            done
            [ -n "$ONLY" ] || { echo "gpu.sh: --only needs stage names ($STAGE_NAMES)" >&2; exit 2; }
            shift
            ;;
        *) echo "gpu.sh: run: unknown option '$1' (--dry-run, --only STAGES)" >&2; exit 2 ;;
        esac
        shift
    done
    export PYTHONUNBUFFERED=1
    STAGES="$OUT/stages.jsonl"  # on the device: beside $OUT (the tool brings back 8 files: the 4 logs, the 4 JSONs)
    [ "$dry" = "--dry-run" ] || STAGES=/tmp/stages.jsonl
    : >"$STAGES"
    if [ "$dry" = "--dry-run" ]; then
        local py=python3 dev=cpu
        stage preflight 120 $py benchmarks/gpu_preflight.py --dry-run --budget 110 --json "$OUT/preflight.json"
        stage llm 130 $py benchmarks/bench_llm_head.py --no-proxies --steps 3 --warmup 1 --budget 115 \
            --warm-start --profile-steps 2 --json "$OUT/llm.json"
        stage cache 60 $py benchmarks/bench_cache.py --device $dev --models random-vit --codecs fp16 --images 64 \
            --batch-size 8 --shard-size 32 --repeats 1 --error-images 2 --budget 50 --decode-check --profile-batches 2 \
            --json "$OUT/cache.json"
        stage fingerprint 75 $py benchmarks/bench_fingerprint.py --device $dev --modes fingerprint --tokens 49 \
            --dim 64 --scale-to-real 0.001,0.002 --budget 60 --placement-reads 64 \
            --zarr-check counting,recognition,scene --json "$OUT/fingerprint.json"
    else
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
            .whl/*.whl || exit 1
        export PYTHONPATH="$PWD:/tmp/site"
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
        stage preflight 100 python3 benchmarks/gpu_preflight.py --device cuda --compile off --budget 97 \
            --json "$OUT/preflight.json"
        stage llm 175 python3 benchmarks/bench_llm_head.py --device cuda --no-proxies --budget 160 --warm-start \
            --profile-steps 8 --json "$OUT/llm.json"
        stage cache 125 python3 benchmarks/bench_cache.py --device cuda --dtype bf16 --models siglip:random \
            --codecs fp16 --images 2048 --batch-size 128 --shard-size 256 --num-workers 14 --repeats 1 \
            --error-images 4 --budget 113 --decode-check --profile-batches 6 --json "$OUT/cache.json"
        stage fingerprint 125 python3 benchmarks/bench_fingerprint.py --device cuda --modes fingerprint \
            --tokens 729 --dim 1152 --scale-to-real 0.02,0.04 --budget 113 --placement-reads 256 \
            --zarr-check counting,recognition,scene --json "$OUT/fingerprint.json"
    fi
    echo "== all stages: $SECONDS s"
    echo "== summary (the figures against their targets; the reply shows this last)"
    python3 benchmarks/gpu_summary.py "$OUT" "$STAGES"
}

case "${1:-}" in
wheels)
    set -e
    mkdir -p .whl
    # shellcheck disable=SC2086
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        $PLATFORMS --platform any -d .whl $WHEELS
    du -sh .whl
    ;;
run)
    shift
    run "$@"
    ;;
*)
    echo "usage: bash benchmarks/gpu.sh wheels | run [--dry-run] [--only STAGES]   (OUT=DIR: where the results go)" >&2
    exit 2
    ;;
esac
