#!/usr/bin/env bash
# Issue 30's device run: the largest evidence runs at once on a 16-core machine, within 7 minutes.
#
#   OUT=/path/to/folder bash experiments/device/evidence.sh
#
# Needs a working `gdpfed` (the repository installed, `pip install -e .[trainer]`) and writes
# only under "$OUT" (run directories go to a scratch folder and are dropped). Three runs in
# parallel, each under a hard time limit, so the script ends by about 6.5 minutes whatever
# happens; every finished cell is kept even when its run is cut short:
#
#   A  experiments/fedhdp_large.yaml   (36 cells, --jobs 9)  -> $OUT/fedhdp_large/
#   B  experiments/gdpfed_map.yaml     (48 cells, --jobs 3)  -> $OUT/gdpfed_map/
#   C  experiments/evidence/mrmtl_map.py, seeds 0 then 1, 12 processes, no new cell after
#      300 s                                                 -> $OUT/mrmtl_map/
#
# The models are tiny (650 to 1 210 parameters) and the experiment runner trains every cell
# on the CPU (trainer/experiments/cell.py), so the GPU is not used: the 16 cores are what
# this run needs. $OUT/env.txt records the machine; $OUT/*.log each run's output and
# $OUT/*.rc its exit status (124: cut by its time limit, cells done so far are in cells/).
# EVIDENCE_SMOKE=1 runs the same script at smoke size, one process per run (a check of the
# script itself, not a result; a few minutes on a quiet 2-core machine).
# The limits are EVIDENCE_LIMIT (370 s, each run's hard limit) and EVIDENCE_DEADLINE (300 s,
# the map's last start); the script needs about LIMIT + 20 s. A call that also installs the
# environment must leave room for that: on 2026-11-26 one 420 s call that did returned
# nothing; a later 560 s call (setup 9 s, LIMIT 420, DEADLINE 350, partial results tarred
# under $OUT every 20 s) finished in 376 s (docs/results.md §8.2).
set -u
: "${OUT:?set OUT to the folder the results go to}"
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 MPLBACKEND=Agg
command -v gdpfed > /dev/null || { echo "evidence: no gdpfed on PATH (install the repository first)" >&2; exit 2; }
python -c 'import torch, sklearn' || { echo "evidence: torch and scikit-learn must import" >&2; exit 2; }
mkdir -p "$OUT"
SCRATCH=$(mktemp -d)
LIMIT=${EVIDENCE_LIMIT:-370}
DEADLINE=${EVIDENCE_DEADLINE:-300}
SMOKE=()
MAP_ARGS=(--seeds 0 1)
JOBS=(9 3 12)
if [ "${EVIDENCE_SMOKE:-0}" = 1 ]; then
  SMOKE=(--smoke)
  MAP_ARGS=(--seeds 0 --only g4-mask-n50-eps4-T10-lr0.5)
  JOBS=(1 1 1)
  LIMIT=${EVIDENCE_LIMIT:-600}
fi
{
  date -u
  echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "cores $(getconf _NPROCESSORS_ONLN)"
  python -V
  python -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
  nvidia-smi -L 2>/dev/null || echo "no nvidia-smi"
  grep -m1 "model name" /proc/cpuinfo || true
  echo "limit ${LIMIT}s, mrmtl_map deadline ${DEADLINE}s, smoke ${EVIDENCE_SMOKE:-0}"
} > "$OUT/env.txt" 2>&1
start=$(date +%s)

run() {  # name, then the command: run it under the time limit, log and exit status in $OUT
  local name=$1
  shift
  ( timeout -k 5 "$LIMIT" "$@" > "$OUT/$name.log" 2>&1; echo $? > "$OUT/$name.rc" ) &
}

run fedhdp_large gdpfed experiment experiments/fedhdp_large.yaml --out "$SCRATCH/fedhdp_large" --jobs "${JOBS[0]}" "${SMOKE[@]}"
run gdpfed_map gdpfed experiment experiments/gdpfed_map.yaml --out "$SCRATCH/gdpfed_map" --jobs "${JOBS[1]}" "${SMOKE[@]}"
run mrmtl_map python experiments/evidence/mrmtl_map.py --out "$OUT/mrmtl_map" --runs "$SCRATCH/mrmtl_runs" \
  --jobs "${JOBS[2]}" --deadline "$DEADLINE" "${MAP_ARGS[@]}"
wait

for name in fedhdp_large gdpfed_map; do
  mkdir -p "$OUT/$name"
  cp -r "$SCRATCH/$name/cells" "$OUT/$name/" 2>/dev/null || true
  cp "$SCRATCH/$name"/results.* "$OUT/$name/" 2>/dev/null || true
done
# the map's summary again, in case its run was cut before writing it
python -c 'import sys; sys.path.insert(0, "experiments/evidence"); import mrmtl_map, pathlib; mrmtl_map.summarise(pathlib.Path(sys.argv[1]))' \
  "$OUT/mrmtl_map" >> "$OUT/mrmtl_map.log" 2>&1 || true
echo "wall $(( $(date +%s) - start )) s" >> "$OUT/env.txt"
rm -rf "$SCRATCH"
echo "evidence: done in $(( $(date +%s) - start )) s; results in $OUT"
