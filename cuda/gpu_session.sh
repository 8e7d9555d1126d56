#!/usr/bin/env bash
# The standing order for a lent GPU, prepared as ONE call of the device tool's `run`: a session
# gets 15 minutes of device time in all, start-up included, so one call of under 10 minutes is
# what fits.
#
#   run(command="bash cuda/gpu_session.sh", carry=[".whl", ".gpu"], timeout_s=595)
#
# 1. inference: the acting side on Atari (launch/bench.py inference, 12 workers x 4 games = the
#    papers' 48, 1 and 2 splits): raw ALE, actor mode, server mode, zero-cost server (issue 41:
#    zero-cost >= 0.8 of raw).
# 2. serve_cost: the server's own work per batch of 48 games (cuda/serve_cost.py: the serve
#    function driven with no env workers, zero-cost policy on the GPU, cProfile's top functions);
#    then per 48 games served in batches of 4 units of 2 games (2 splits, staggered workers).
#    Both with atari.yaml's batch of 32 games (8 units per batch), whose rows the serve function
#    writes as runs of consecutive units since 2026-11-27 (earlier sessions: one unit per batch).
# 3. parity: does the Pong checkpoint carried in .gpu/ (the eleventh run's, 2.84M steps: +2.8 in
#    training, sampled on the GPU; -10.2 sampled and +0.5 to +1.7 argmax when played on the CPU)
#    act on the GPU as on the CPU? cuda/policy_parity.py plays one game per env (16) on the GPU
#    with sampled actions (their mean score), then replays the inputs on the CPU, on the GPU without TF32 and with
#    the reference kernels, and on the GPU as played: KL, logit gaps and argmax agreement per
#    stretch of time. Prepare: mkdir -p .gpu && cp <that checkpoint> .gpu/pong_delta_2.84M.pt and
#    add .gpu to carry (without it the step is skipped). It replaced env_threads (the zero-cost
#    server with one ALE thread per worker against the default: level in five sessions running).
# 3b. cores: launch/bench.py cores on the GPU for lstm, gru, lru (issue 74) and delta, T = 64, B = 32.
# 4. atari_training: the papers' setup end to end (deep ResNet, delta core, 48 Pong games, server
#    mode with the faster split of step 1) for TRAIN_S seconds (300 by default, which leaves the
#    parity step its time within 15 minutes); its logs.csv (sps, learner_wait and
#    mean_return per update) comes back as $OUT/atari_logs.csv (a call returns at most 8 files). Halfway
#    through, py-spy samples the learner's process (its inference and learner threads) for 30 s
#    into $OUT/pyspy_learner.txt (raw collapsed stacks): where the serve loop's time goes.
#    The run lives in /tmp/atari_run, which a warm machine keeps between calls (it goes back
#    after 30 s idle): `TRAIN_ONLY=1 TRAIN_S=330 bash cuda/gpu_session.sh` (timeout_s=380), called
#    at once after the first call, skips steps 1-3 and resumes the run for another TRAIN_S seconds
#    (2026-11-28: 1.17M to 2.28M steps, Pong -18.7 to -9.9; 1.23M to 2.61M, -16.9 to +0.7; 1.30M
#    to 2.66M, -16.4 to -7.6; 1.40M to 2.84M, -13.0 to +2.8; both calls took 837-851 s of the 900
#    each time, with the 42 s env_threads step and 330 + 340 s of training). The ninth session's
#    first call left no checkpoint (no periodic one within 5.5 minutes, and the run died at its
#    SIGTERM), so its second call started afresh: the run now checkpoints every 2 minutes.
# The Triton kernels have not changed since they passed every test on the H100 (2026-11-25; on
# 2026-11-28 a wrapper's name check did, which the interpreter tests cover); their
# checks are `TRITON_INTERPRET=0 python -m pytest -n 8 tests/test_kernels.py tests/test_dispatch.py`
# and `python cuda/smoke.py --quick`, for a session whose change touches fastnet/kernels.
#
# Prepare here, once per machine (nothing can be fetched on the device):
#   echo /.whl/ >> .git/info/exclude
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux1_x86_64 -d .whl \
#     gymnasium==1.4.0 ale-py==0.12.1 jsonargparse==4.53.0 docstring-parser farama-notifications typeshed-client \
#     py-spy
# Each step's output is in $OUT/<step>.txt.
set -u
TRAIN_S=${TRAIN_S:-300}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "the wheels in .whl did not install"; exit 1; }
# PYTHONFAULTHANDLER: a native crash prints every thread's stack (2026-11-28, ninth session: the
# first call's training died silently at its SIGTERM and left no checkpoint)
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 TRITON_INTERPRET=0
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
splits=$(cat /tmp/atari_splits 2>/dev/null || echo 1)  # a resumed run keeps the first call's choice
if [ -z "${TRAIN_ONLY:-}" ]; then
  step inference 75 python3 launch/bench.py inference --device cuda --env atari --core delta --num-actors 12 \
    --envs-per-actor 4 --splits 1 2 --wait-ms 2 --reps 1
  # the faster of the two server modes (1 split when the bench did not finish)
  splits=$(awk '/^server mode, 1 split/ {one=$(NF-2)} /^server mode, 2 splits/ {two=$(NF-2)}
                END {print (two > one ? 2 : 1)}' "$OUT/inference.txt")
  echo "$splits" > /tmp/atari_splits
  step serve_cost 30 python3 cuda/serve_cost.py --device cuda --batch-size 32 --profile
  step serve_cost_small_batches 30 python3 cuda/serve_cost.py --device cuda --batch-size 32 --splits 2 --units-per-batch 4
  # issue 74's new cores on the GPU: lru's chunked complex scan runs as torch ops there (no kernel)
  step cores 30 python3 launch/bench.py cores --device cuda --cores lstm gru lru delta --shapes 64x32 --reps 5
  if [ -f .gpu/pong_delta_2.84M.pt ]; then
    step parity 110 python3 cuda/policy_parity.py .gpu/pong_delta_2.84M.pt --device cuda --envs 16 --replay-envs 6
  fi
fi
( sleep $((TRAIN_S / 2)); pid=$(pgrep -o -f '^python3 launch/atari.py') && /tmp/site/bin/py-spy record --pid "$pid" \
    --duration 30 --rate 200 --threads --idle --nonblocking --format raw -o "$OUT/pyspy_learner.txt" \
    > /tmp/pyspy.txt 2>&1 ) &
step atari_training "$TRAIN_S" python3 launch/atari.py --game Pong --core delta --run.device cuda \
  --actor.inference server --actor.num_actors 12 --actor.envs_per_actor 4 --actor.server.worker_splits "$splits" \
  --run.total_steps 200000000 --run.run_dir /tmp/atari_run --run.resume true --log.tensorboard false --log.print_every_s 15 \
  --checkpoint.interval_minutes 2
cat /tmp/pyspy.txt
cp /tmp/atari_run/logs.csv "$OUT/atari_logs.csv"  # the curve is what comes back; the run stays for TRAIN_ONLY=1
# the resumed call's checkpoint comes back too (12.2 MB; a returned file may have 16 MiB), to be
# evaluated on any machine: python launch/evaluate.py atari_checkpoint.pt --runs 1 --episodes 10
if [ -n "${TRAIN_ONLY:-}" ]; then cp /tmp/atari_run/checkpoint.pt "$OUT/atari_checkpoint.pt"; fi
