#!/usr/bin/env bash
# Check the CUDA backend on a machine with an NVIDIA GPU, in a few minutes:
#   1. the CUDA tests (tests/profile/test_cuda.py), and the profiler against a plain training loop
#      on the GPU (tests/test_reference_loop.py: latency within 15 %, memory within 10 %);
#   2. the profiling of examples/cuda_gpu.ini (eight networks at four pruning levels, 3x224x224,
#      training first, then inference), stopped after GPU_CHECK_PROFILE_S seconds (default 330);
#      a second run resumes where the first stopped when out/cuda/logs is still there;
#   3. a table of the training figures at the largest batch size.
# Logs and the profiling logs (out/cuda/logs, as cuda_logs.tar.gz) go to $OUT (if set) or a
# temporary folder.
#
#   scripts/gpu_check.sh
#
# Uses .venv/bin/python when it imports torch, else python3; torch must be installed already.
# With no package index in reach, put wheels of the missing packages in .whl/ (torch-pruning,
# skops and its needs): they and perf4sight itself are installed into a temporary folder
# without reaching the network. Architecture specs in out/cuda/models are used as they are
# (prune on any machine, copy them over); without them the networks are pruned here first.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=python3
if [ -x .venv/bin/python ] && .venv/bin/python -c "import torch" 2>/dev/null; then
    PYTHON=.venv/bin/python
fi
if ! "$PYTHON" -c "import torch" 2>/dev/null; then
    echo "gpu_check: $PYTHON cannot import torch; install a CUDA build of torch first" >&2
    exit 1
fi
if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_check: torch $("$PYTHON" -c 'import torch; print(torch.__version__)') sees no CUDA GPU" >&2
    exit 1
fi

if ! "$PYTHON" -c "import perf4sight" 2>/dev/null; then
    SITE=$(mktemp -d)
    if compgen -G ".whl/*.whl" >/dev/null; then
        echo "gpu_check: installing perf4sight and .whl/ into $SITE, offline"
        "$PYTHON" -m pip install --quiet --no-index --no-deps --no-build-isolation --no-compile \
            --target "$SITE" .whl/*.whl .
    else
        echo "gpu_check: installing perf4sight into $SITE"
        "$PYTHON" -m pip install --quiet --target "$SITE" .
    fi
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi

export COLUMNS="${COLUMNS:-150}" PYTHONUNBUFFERED=1
LOG_DIR="${OUT:-$(mktemp -d)}"
mkdir -p "$LOG_DIR"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>/dev/null || true

status=0
timeout 150 "$PYTHON" -m pytest -q -p no:cacheprovider tests/profile/test_cuda.py 2>&1 \
    | tee "$LOG_DIR/pytest_cuda.log" || status=1
timeout 240 "$PYTHON" -m pytest -q -s -p no:cacheprovider -p no:xdist tests/test_reference_loop.py -k cuda 2>&1 \
    | tee "$LOG_DIR/pytest_reference_loop.log" || status=1

timeout --signal=INT --kill-after=20 "${GPU_CHECK_PROFILE_S:-330}" "$PYTHON" - <<'EOF' || status=1
from pathlib import Path

from perf4sight import console
from perf4sight.config import load_config
from perf4sight.networks import create_network_dataset
from perf4sight.profile import create_test_config, profile_campaign, read_test_config

config = load_config("examples/cuda_gpu.ini")
settings = config.profile
if not any(Path(settings.local_model_loc).glob("*.json")):
    create_network_dataset(config.create_network_dataset)
create_test_config(settings)
tests = sorted(read_test_config(settings.test_config), key=lambda test: test.stage != "training")
profile_campaign(tests, log_dir=settings.log_dir, device=settings.device, gpu_id=settings.gpu_id,
                 iterations=settings.iterations, warmup=settings.warmup, till_first_fail=settings.till_first_fail,
                 save=settings.save, memory_limit_mib=settings.memory_limit_mib)
EOF

"$PYTHON" - <<'EOF' || status=1
import json
from pathlib import Path

from perf4sight import console
from perf4sight.profile import read_journal

log_dir, BS = Path("out/cuda/logs"), 128
rows = {}
for path in sorted(p for p in log_dir.glob("*/*.csv") if not p.stem.endswith("-gt")):
    for row in read_journal(path):
        params = row["params"]
        if row["passed"] and params["exec_stage"] == "training" and params["bs"] == BS:
            figures = rows.setdefault(path.stem, {})
            figures.update({key: row.get(key) for key in ("mem_used", "mem_reserved", "mem_alloc", "latency")
                            if row.get(key) is not None})
console.print_table(f"training at batch size {BS} (MiB, ms)", ["model", "mem_used", "mem_reserved", "mem_alloc",
                                                              "latency"],
                    [[name, *(f.get(k) for k in ("mem_used", "mem_reserved", "mem_alloc", "latency"))]
                     for name, f in rows.items()])
for environment in sorted(log_dir.glob("environment-*.json")):
    console.info(f"{environment.name}: " + json.dumps(json.loads(environment.read_text())))
EOF

tar -czf "$LOG_DIR/cuda_logs.tar.gz" out/cuda/logs out/cuda/test_config.ini 2>/dev/null || true
exit $status
