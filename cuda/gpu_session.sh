#!/usr/bin/env bash
# The standing order for a lent GPU, prepared so that a session spends its device time on
# measuring: two calls of the device tool's `run`, each under its 10-minute limit.
#
#   run(command="bash cuda/gpu_session.sh acting", carry=[".whl", ".base"], timeout_s=590)
#   run(command="bash cuda/gpu_session.sh kernels", carry=[".whl"], timeout_s=420)
#
# acting:  cuda/smoke.py --quick (the kernels' self-check, server mode on the device's stream and
#          on a side stream against sequential rollouts, a server-mode maze run); the acting
#          side on Atari (launch/bench.py inference, 8 workers x 6 games, the papers' 48), beside
#          the same benchmark of the commit in .base when there is one; a short Atari training
#          run on the GPU (issue 26's first end-to-end run).
# kernels: the kernel and dispatch tests compiled for the GPU (TRITON_INTERPRET=0), then
#          cuda/bench.py --quick.
#
# Prepare here, once per machine (nothing can be fetched on the device):
#   echo /.whl/ >> .git/info/exclude; echo /.base/ >> .git/info/exclude
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl \
#     gymnasium==1.4.0 ale-py==0.12.1 jsonargparse==4.53.0 docstring-parser farama-notifications typeshed-client
#   rm -rf .base && mkdir .base && git archive BASE_COMMIT agents envs fastnet launch | tar -x -C .base
# Each step's output is in $OUT/<step>.txt (the tool brings back 8 files at most).
set -u
part=${1:?usage: bash cuda/gpu_session.sh acting|kernels}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "the wheels in .whl did not install"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TRITON_INTERPRET=0
OUT=${OUT:-/tmp/gpu_session}
mkdir -p "$OUT"

step() {  # step NAME SECONDS COMMAND...: run COMMAND for at most SECONDS, its output to $OUT/NAME.txt
  local name=$1 seconds=$2
  shift 2
  echo "=== $name (at most ${seconds} s): $*"
  local start=$SECONDS
  timeout --kill-after 20 "$seconds" "$@" > "$OUT/$name.txt" 2>&1
  local status=$?
  tail -n 25 "$OUT/$name.txt"
  echo "=== $name: exit $status after $((SECONDS - start)) s"
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cpus', __import__('os').cpu_count())"
atari=(launch/bench.py inference --device cuda --env atari --num-actors 8 --envs-per-actor 6 --splits 1 --wait-ms 0 2 --reps 1)
case $part in
  acting)
    step smoke 200 python3 cuda/smoke.py --quick
    step inference 110 python3 "${atari[@]}"
    if [ -d .base ]; then
      (cd .base && export PYTHONPATH=/tmp/site:$PWD && step inference_base 110 python3 "${atari[@]}")
    fi
    step atari_training 100 python3 launch/atari.py --run.device cuda --run.total_steps 2000000 \
      --run.run_dir /tmp/atari_run --log.tensorboard false --log.print_every_s 10
    ;;
  kernels)
    step kernel_tests 300 python3 -m pytest -q -x -n 8 -p no:cacheprovider tests/test_kernels.py tests/test_dispatch.py
    step kernel_bench 100 python3 cuda/bench.py --quick
    ;;
  *)
    echo "unknown part $part: acting or kernels"
    exit 2
    ;;
esac
