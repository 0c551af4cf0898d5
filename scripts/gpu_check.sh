#!/usr/bin/env bash
# Check the CUDA profiler on a machine with an NVIDIA GPU, in under 5 minutes:
# resnet18 and mobilenet_v2 (3x224x224, 1000 classes) at three batch sizes, training and
# inference, memory and latency; prints the figures and runs the CUDA tests.
#
#   scripts/gpu_check.sh            # logs under $OUT (if set) or a temporary folder
#
# Uses .venv/bin/python when it imports torch, else python3. torch must be installed
# already (the pip index may be out of reach); other missing packages are pip-installed
# when possible. The package itself runs from src/ (no installation needed).
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

missing=$("$PYTHON" - <<'EOF'
import importlib.util
packages = {"torchvision": "torchvision", "torch_pruning": "torch-pruning", "rich": "rich",
            "typer": "typer", "psutil": "psutil", "pynvml": "nvidia-ml-py", "pandas": "pandas",
            "sklearn": "scikit-learn", "skops": "skops", "pytest": "pytest"}
print(" ".join(p for m, p in packages.items() if importlib.util.find_spec(m) is None))
EOF
)
if [ -n "$missing" ]; then
    echo "gpu_check: installing $missing"
    "$PYTHON" -m pip install --quiet $missing || echo "gpu_check: warning: could not install $missing" >&2
fi

export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export COLUMNS="${COLUMNS:-150}"
LOG_DIR="${OUT:-$(mktemp -d)}/gpu_check"
rm -rf "$LOG_DIR"
mkdir -p "$LOG_DIR"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>/dev/null || true

timeout 170 "$PYTHON" - "$LOG_DIR" <<'EOF'
import json
import sys
import time
from pathlib import Path

from perf4sight import console
from perf4sight.profile import ProfileTest, profile_campaign

log_dir = Path(sys.argv[1])
tests = [
    ProfileTest(test_var, bs, "imagenet", net, stage, net)
    for net in ("resnet18", "mobilenet_v2")
    for stage in ("training", "inference")
    for test_var in ("memory", "latency")
    for bs in (8, 32, 128)
]
start = time.perf_counter()
summary = profile_campaign(tests, log_dir=log_dir, device="cuda", iterations=3, warmup=1)
elapsed_s = time.perf_counter() - start

rows = {}
for result in summary.results:
    test = result.test
    row = rows.setdefault((test.net_name, test.stage, test.bs), {})
    if test.test_var == "memory" and result.outcome is not None and result.outcome.memory is not None:
        memory = result.outcome.memory
        row.update(mem_alloc=memory.mem_alloc, mem_reserved=memory.mem_reserved, mem_used=memory.mem_used,
                   mem_context=memory.mem_context)
    if test.test_var == "latency":
        row["latency"] = result.latency_ms
    row.setdefault("status", set()).add(result.status)
columns = ["network", "stage", "bs", "mem_alloc MiB", "mem_reserved MiB", "mem_used MiB", "context MiB",
           "latency ms", "status"]
table = [
    [net, stage, bs, row.get("mem_alloc"), row.get("mem_reserved"), row.get("mem_used"),
     row.get("mem_context"), row.get("latency"), ",".join(sorted(row["status"]))]
    for (net, stage, bs), row in rows.items()
]
console.print_table("CUDA profiler check", columns, table)
environment = json.loads(summary.environment_file.read_text())
keys = ("device_name", "driver", "torch", "torch_cuda", "cudnn", "cuda_context_mib", "power_limit_w",
        "cuda_module_loading", "cpu_cores_logical")
console.info("environment: " + ", ".join(f"{k}={environment.get(k)}" for k in keys))
console.info(f"{len(tests)} tests in {elapsed_s:.1f} s: passed {summary.passed}, failed {summary.failed}; "
             f"logs in {log_dir}")
sys.exit(0 if summary.passed == len(tests) else 1)
EOF

if "$PYTHON" -c "import pytest" 2>/dev/null; then
    timeout 110 "$PYTHON" -m pytest -q -p no:cacheprovider tests/profile/test_cuda.py
fi
