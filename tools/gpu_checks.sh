#!/bin/bash
# The CUDA backend's checks and benchmarks on a lent GPU machine, in one
# command (docs/cuda.md, "On a lent GPU machine"). Run from the checkout's
# root after tools/gpu_bundle.sh on the build machine, with .gpu/ (and, for
# the rl stage, runs/demo/sft) carried along:
#
#   bash tools/gpu_checks.sh [STAGE ...]     default: tests sanitize kernels train merge
#
# GPU time is short: with GPU_CHECKS_SECONDS=N the script stops starting
# commands N seconds after it began and shortens each command's limit to what
# is left (less 10 s for a SIGKILL after the SIGTERM), so that a call's own
# deadline never cuts a log short.
#
# Stages (each command under `timeout`, its output in $OUT/<stage>.log, a
# summary line and the log's tail on stdout; the script exits 1 when any
# command failed, 2 on a bad stage name or a missing bundle):
#   tests     forge_unit_tests --gtest_filter='CudaDevice*.*'
#   sanitize  compute-sanitizer memcheck, racecheck and synccheck over the
#             attention, head and policy-loss cases (FP32 in 3xTF32 and
#             exact, bf16)
#   kernels   bench_cuda_kernels at T 16384 (D 128, then 64) and 4096 (D 128),
#             with PyTorch's SDPA beside forge's attention (FP32: 3xTF32
#             and exact)
#   train     bench_train_step --backend=cuda at the reference size and at
#             d 1024, 16 layers, 16 heads, FFN 2816, 16 x 1024 tokens, the
#             latter with --profile (ms per backend operation, FP32 and bf16)
#   merge     bench_tree_merge --backend=cuda --profile, FP32 and bf16 (where
#             the tree step's time goes against the linear step's)
#   profile   Nsight Compute (ncu) on the tensor-core attention kernels,
#             3xTF32 and bf16, forward, dK/dV and dQ, causal T 4096 at D 64
#             and D 128 (bench_cuda_kernels' first calls; then the opt-in
#             wgmma forward's, dK/dV's and dQ's, 1 and 2 warpgroups):
#             throughput of
#             each unit against its peak, occupancy, warp stall reasons,
#             shared-memory bank conflicts; the why behind the kernels stage
#   cpu       the host CPU's figures: bench_train_step --backend=cpu (with
#             --profile; the baseline's too, --no-torch, where there is one)
#             and bench_blas on 2 cores (taskset -c 0,1, 2 threads: the CPU
#             issue's size), then both on all cores
#   native    the portable build against one for the host's CPU
#             (.gpu/native.tar.xz, tools/gpu_bundle.sh --native-for ARCH) on 2
#             cores: bench_train_step --no-torch and bench_tree_merge
#             --quick, alternating, three times each
# A/B: where .gpu/baseline.tar.xz holds bench_cuda_kernels or bench_train_step of
# an earlier build, the kernels and train stages run them too (--no-torch),
# each right after the current build's run on the same shape.
#   rl        the main job's RL phase (mpirun, 5 ranks sharing the GPU, 50
#             steps from runs/demo/sft, 64 evaluation tasks) with
#             --run.backend=cuda, then cpu (rl-cuda, rl-cpu: one of them)
#   publish   the same RL phase with the 206M model of the train stage (d 1024,
#             16 layers), from scratch, 3 steps: the learner's "weights: ...
#             published, median X ms each" for a large model
# The bundle's BLIS is Debian's build; where Debian's path for it is free and
# writable (the device runs as root) it is placed there for the run, so forge
# chooses its configuration as after tools/setup.sh (a copy elsewhere chooses
# alone, src/backend/cpu/blis_config.hpp), and removed at the end.
# $OUT defaults to ./gpu-out; $FORGE_PYTHON to the python3 on PATH.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-out}
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(tests sanitize kernels train merge)
for stage in "${stages[@]}"; do
  case $stage in
    -h | --help) sed -n '2,/^set -u$/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    tests | sanitize | kernels | train | merge | profile | cpu | native | rl | rl-cuda | rl-cpu | publish) ;;
    *) echo "gpu_checks: unknown stage '$stage' (tests sanitize kernels train merge profile cpu native rl rl-cuda rl-cpu publish; --help describes them)" >&2; exit 2 ;;
  esac
done
budget=${GPU_CHECKS_SECONDS:-0}
[[ $budget =~ ^[0-9]+$ ]] || { echo "gpu_checks: GPU_CHECKS_SECONDS must be a number of seconds, got '$budget'" >&2; exit 2; }
budget=$((10#$budget))
grace=10  # seconds a command gets after SIGTERM before SIGKILL
[ -f "$root/.gpu/forge-gpu.tar.xz" ] || { echo "gpu_checks: no .gpu/forge-gpu.tar.xz (run tools/gpu_bundle.sh)" >&2; exit 2; }
mkdir -p "$out"

pkg=$(mktemp -d)
ompi=$(mktemp -d)
runs=$(mktemp -d)  # the RL stages' run folders: only logs go to $out (a device call returns few files)
debian_blis=/usr/lib/x86_64-linux-gnu/blis-openmp
placed_blis=""
trap 'rm -rf "$pkg" "$ompi" "$runs"; [ -z "$placed_blis" ] || { rm -f "$placed_blis"; rmdir "$debian_blis" 2>/dev/null; }' EXIT
# unpack FILE DIR: a bundle (tar, xz) into DIR, by tar where xz is
# installed, else by Python's tarfile
unpack() {
  if command -v xz >/dev/null; then
    tar xJf "$1" -C "$2"
  else
    "${FORGE_PYTHON:-python3}" -c 'import sys, tarfile
extra = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
tarfile.open(sys.argv[1]).extractall(sys.argv[2], **extra)' "$1" "$2"
  fi
}
unpack "$root/.gpu/forge-gpu.tar.xz" "$pkg" ||
  { echo "gpu_checks: cannot unpack .gpu/forge-gpu.tar.xz (rebuild it with tools/gpu_bundle.sh)" >&2; exit 2; }
if [ -f "$pkg/lib/libblis.so.4" ] && [ ! -e "$debian_blis/libblis.so.4" ] && mkdir -p "$debian_blis" 2>/dev/null &&
  cp "$pkg/lib/libblis.so.4" "$debian_blis/" 2>/dev/null; then
  placed_blis=$debian_blis/libblis.so.4
fi
cuda=/usr/local/cuda
if command -v nvcc >/dev/null; then cuda=$(dirname "$(dirname "$(command -v nvcc)")"); fi
export PATH=$PATH:$cuda/bin  # compute-sanitizer
export LD_LIBRARY_PATH=$pkg/lib:$cuda/lib64:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-16}
export FORGE_PYTHON=${FORGE_PYTHON:-$(command -v python3)}
bin=$pkg/bin
# An earlier build's bench binaries (A/B on the same GPU) and a build for the
# host's CPU, where tools/gpu_bundle.sh packed them
base=$pkg/baseline
native=$pkg/native
for extra in "$base" "$native"; do
  packed=$root/.gpu/$(basename "$extra").tar.xz
  [ -f "$packed" ] || continue
  mkdir -p "$extra"
  unpack "$packed" "$extra" || { echo "gpu_checks: cannot unpack $packed (rebuild it with tools/gpu_bundle.sh)" >&2; exit 2; }
done
failed=0
# Every library the binaries load, found here (the bundle leaves the CUDA
# runtime, cuBLAS and NCCL to this machine: CUDA_LIBS names the versions
# the build linked): a missing one ends the run before any stage.
missing=$(ldd "$bin"/* 2>&1 | grep 'not found' | sort -u || true)
if [ -n "$missing" ]; then
  echo "$missing" >&2
  echo "gpu_checks: the libraries above are not on this machine (the build linked: $(cat "$pkg/CUDA_LIBS" 2>/dev/null))" >&2
  exit 2
fi

# run NAME SECONDS CMD...: appends CMD's output to $out/NAME.log; within
# GPU_CHECKS_SECONDS, skipped (rc 124) when under 10 s are left.
run() {
  local name=$1 limit=$2
  shift 2
  if [ "$budget" -gt 0 ]; then
    local left=$((budget - SECONDS - grace))
    if [ $left -lt 10 ]; then
      echo "gpu_checks: $name: skipped, GPU_CHECKS_SECONDS=$budget spent: $*" | tee -a "$out/$name.log"
      failed=1
      return 124
    fi
    [ $left -ge "$limit" ] || limit=$left
  fi
  echo "\$ $*" >>"$out/$name.log"
  local t0=$SECONDS
  timeout -k "$grace" "$limit" "$@" >>"$out/$name.log" 2>&1
  local rc=$?
  # In the stage's log too: the call's output keeps only its tail.
  echo "gpu_checks: $name: rc $rc in $((SECONDS - t0)) s: $*" | tee -a "$out/$name.log"
  [ $rc -eq 0 ] || failed=1
  return $rc
}

{ nvidia-smi -L; lscpu | grep -E "^(Model name|CPU family|Model|CPU\(s\)):"
  grep -o -w -E "avx512f|avx512_bf16|avx512_fp16|amx_tile" /proc/cpuinfo | sort -u | tr '\n' ' '; echo
  echo "CUDA libraries the build linked: $(cat "$pkg/CUDA_LIBS" 2>/dev/null)"
  [ -f "$base/REVISION" ] && echo "baseline (.gpu/baseline.tar.xz): commit $(cat "$base/REVISION")"
  [ -n "$placed_blis" ] && echo "the bundle's BLIS placed at Debian's path for this run: $placed_blis"; } 2>&1 |
  tee "$out/device.log"
declare -A begun=()
for stage in "${stages[@]}"; do
  [ -n "${begun[$stage]:-}" ] || : >"$out/$stage.log"  # a stage named twice appends to its log
  begun[$stage]=1
  case $stage in
    tests)
      run tests 120 "$bin/forge_unit_tests" --gtest_filter='CudaDevice*.*' ;;
    sanitize)
      cases='CudaDevice*.*Attention*:CudaDevice.*Head*:CudaDevice.PolicyLoss*'
      for tool in memcheck racecheck synccheck; do
        run sanitize 300 compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin/forge_unit_tests" --gtest_filter="$cases"
      done ;;
    kernels)
      for shape in "--tokens=16384 --reps=5" "--tokens=16384 --dim=64 --reps=5" "--tokens=4096"; do
        # shellcheck disable=SC2086  # the shape is a list of flags
        run kernels 200 "$bin/bench_cuda_kernels" $shape
        [ -x "$base/bench_cuda_kernels" ] && run kernels 200 "$base/bench_cuda_kernels" $shape --no-torch
      done ;;
    train)
      run train 200 "$bin/bench_train_step" --backend=cuda --rounds=2
      big=(--backend=cuda --d_model=1024 --layers=16 --heads=16 --ffn=2816 --batch=16 --seq=1024 --rounds=2)
      run train 400 "$bin/bench_train_step" "${big[@]}" --profile
      [ -x "$base/bench_train_step" ] && run train 300 "$base/bench_train_step" "${big[@]}" --no-torch ;;
    cpu)
      # 2 cores first (the CPU issue's size, not yet measured there), then all.
      # --profile: where the 2-core step goes on this CPU (on 2026-11-26 it ran at
      # 0.59 of SGEMM here against 0.70-0.74 on a Zen 5)
      OMP_NUM_THREADS=2 run cpu 200 taskset -c 0,1 "$bin/bench_train_step" --backend=cpu --rounds=3 --profile
      # the baseline's CPU step beside it: its CPU kernels against these,
      # per operation (bench_cpu_attention is not bundled: each bench binary
      # carries the CUDA kernels, 12 MB)
      [ -x "$base/bench_train_step" ] &&
        OMP_NUM_THREADS=2 run cpu 120 taskset -c 0,1 "$base/bench_train_step" --backend=cpu --rounds=3 --no-torch --profile
      OMP_NUM_THREADS=2 run cpu 200 taskset -c 0,1 "$bin/bench_blas" --threads=2
      run cpu 200 "$bin/bench_blas"
      run cpu 300 "$bin/bench_train_step" --backend=cpu --rounds=2 ;;
    native)
      if [ ! -x "$native/bench_train_step" ]; then
        echo "gpu_checks: native needs .gpu/native.tar.xz (tools/gpu_bundle.sh --native-for ARCH)" | tee -a "$out/native.log"
        failed=1
        continue
      fi
      echo "native build: -march=$(cat "$native/ARCH")" >>"$out/native.log"
      for round in 1 2 3; do
        for build in "$bin" "$native"; do
          OMP_NUM_THREADS=2 run native 120 taskset -c 0,1 "$build/bench_train_step" --backend=cpu --no-torch --rounds=1
          OMP_NUM_THREADS=2 run native 120 taskset -c 0,1 "$build/bench_tree_merge" --quick
        done
      done ;;
    profile)
      # The tensor-core kernels' first 18 launches on the causal mask: the
      # bench's two warm-ups and one timed call of each of six (3xTF32,
      # then bf16: forward, dK/dV, dQ).
      sections=(--section SpeedOfLight --section LaunchStats --section Occupancy --section ComputeWorkloadAnalysis
        --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis_Tables)
      for dim in 64 128; do
        run profile 200 ncu --target-processes all -k 'regex:tree_attention_(fwd|dkdv|dq)_tc_kernel' -c 18 \
          "${sections[@]}" "$bin/bench_cuda_kernels" --tokens=4096 --dim=$dim --reps=1 --no-torch
        # the opt-in wgmma kernels (the bench's "bf16 wgmma", "k128" and
        # "bf16 wgmma x2" rows): two warm-ups and the timed call of the
        # forward, of dK/dV and dQ, and of the 128-key forward, with one
        # warpgroup a block, then with two (3 + 6 + 3 launches each)
        run profile 200 ncu --target-processes all -k 'regex:tree_attention_(fwd|dkdv|dq)_wgmma_kernel' -c 24 \
          "${sections[@]}" "$bin/bench_cuda_kernels" --tokens=4096 --dim=$dim --reps=1 --no-torch
      done ;;
    merge)
      run merge 200 "$bin/bench_tree_merge" --backend=cuda --precision=fp32 --reps=3 --profile
      run merge 200 "$bin/bench_tree_merge" --backend=cuda --precision=bf16 --reps=3 --profile ;;
    rl | rl-cuda | rl-cpu | publish)
      if [ ! -f "$root/.gpu/openmpi.tar.xz" ] || { [ "$stage" != publish ] && [ ! -d "$root/runs/demo/sft" ]; }; then
        echo "gpu_checks: $stage needs .gpu/openmpi.tar.xz and (but for publish) runs/demo/sft" | tee -a "$out/$stage.log"
        failed=1
        continue
      fi
      o=$ompi
      if [ ! -x "$o/bin/orterun" ] && ! unpack "$root/.gpu/openmpi.tar.xz" "$o"; then
        echo "gpu_checks: cannot unpack .gpu/openmpi.tar.xz" | tee -a "$out/$stage.log"
        failed=1
        continue
      fi
      export OPAL_PREFIX=$o OPAL_EXEC_PREFIX=$o OPAL_BINDIR=$o/bin OPAL_LIBDIR=$o/lib/openmpi/lib \
        OPAL_PKGLIBDIR=$o/lib/openmpi/lib/openmpi3 OPAL_SYSCONFDIR=$o/etc/openmpi \
        OPAL_PKGDATADIR=$o/share/openmpi OPAL_DATADIR=$o/share OPAL_DATAROOTDIR=$o/share
      case ":$PATH:" in *":$o/bin:"*) ;; *) export PATH=$o/bin:$PATH LD_LIBRARY_PATH=$o/lib:$o/lib/openmpi/lib:$LD_LIBRARY_PATH ;; esac
      mpirun=(mpirun --allow-run-as-root --oversubscribe -np 5 -x LD_LIBRARY_PATH -x PATH -x OMP_WAIT_POLICY=PASSIVE)
      if [ "$stage" = publish ]; then
        run publish 300 "${mpirun[@]}" "$bin/forge" train --config "$pkg/configs/agent_demo.ini" \
          --run.dir="$runs/publish-206m" --run.backend=cuda --run.threads=1 --model.d_model=1024 --model.n_layers=16 \
          --model.n_heads=16 --model.n_kv_heads=16 --model.ffn_dim=2816 --optim.lr=1e-5 --optim.warmup_steps=0 \
          --train.steps=3 --train.tasks=8 --train.eval_tasks=1
        continue
      fi
      backends="cuda cpu"
      [ "$stage" = rl ] || backends=${stage#rl-}
      for backend in $backends; do
        threads=1
        [ "$backend" = cpu ] && threads=3  # 5 ranks on 16 cores
        run "$stage" 600 "${mpirun[@]}" "$bin/forge" train --config "$pkg/configs/agent_demo.ini" \
          --train.init="$root/runs/demo/sft" --run.dir="$runs/rl-$backend" --run.backend=$backend \
          --run.threads=$threads --optim.lr=1e-4 --optim.warmup_steps=0 --train.steps=50 --train.eval_tasks=64
      done ;;
  esac
  tail -n 25 "$out/$stage.log"
done
exit $failed
