"""The original tool's own config.ini runs through `python main.py --config-file`.

The original split a config's work between two machines with `[profile]`'s `create_config`
(make the test config, on the host) and `run_profiling` (run it, on the device), wrote its
specs to `model_path/<dataset>`, where its `local_model_loc` looks, and shipped a
`[fingerprint]` without `pruned_models_storedir` / `model_storedir`. Below is its config.ini
with its keys, layout and comments, its machine paths moved into the test's folder and the
sizes made small: two networks at three levels, for 32x32 inputs and 10 classes (cifar10), and
latency alone profiled (memory tests, a process each, are the campaign tests' to check).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]

NETWORK_DATASET = """[create_network_dataset]
#{{{{
networks= ['resnet18', 'squeezenet']
pruning_perc= [0,50,90]
mode= random 
model_desc_dir= models/imagenet
model_path= models/pruned/random_pruning
# not in the original (whose networks were for imagenet): this test's small sizes
input_size= [3,32,32]
num_classes= 10
#}}}}
"""

PROFILE = """[profile]
#{{{{
## config creation params (run on any machine)
create_config= {create_config}
dataset= cifar10
network= squeezenet
bs= [2,4]
stage= ['training']
profile_variables= ['latency']
device_model_loc= {device}/models
local_model_loc= models/pruned/random_pruning/cifar10

## profiling params (run on target device)
run_profiling= {run_profiling}
gpu_id= 0
save= True
device= cpu
till_first_fail= False
log_dir= {device}/profiling_csvs/cifar10
test_config= {device}/configs/cifar10/squeezenet.ini
#}}}}
"""

FINGERPRINT = """[fingerprint]
#{{{{
evaluate= False
overwrite= False
stage= training
memory_model= False
latency_model= True
train_nets= ['squeezenet']
train_logs= [0,90]
eval_nets= ['squeezenet']
eval_logs= [50]
memory_logs= ['{device}/profiling_csvs/cifar10/memory']
eval_memory_logs= []
latency_logs= ['{device}/profiling_csvs/cifar10/latency']
eval_latency_logs= []
#}}}}
"""


def _main(config: Path, cwd: Path) -> subprocess.CompletedProcess:
    run = subprocess.run([sys.executable, str(ROOT / "main.py"), "--config-file", str(config)],
                         capture_output=True, text=True, cwd=cwd, timeout=900)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    return run


@pytest.mark.slow
def test_the_original_config_runs_on_host_and_device(tmp_path: Path) -> None:
    host, device = tmp_path / "host", tmp_path / "device"
    (host / "models" / "imagenet").mkdir(parents=True)  # the original's model description files
    values = {"device": device}

    # host: prune, make the test config, do not profile
    config = host / "config.ini"
    config.write_text(NETWORK_DATASET.format() + "\n" + PROFILE.format(create_config=True, run_profiling=False, **values))
    _main(config, host)
    specs = host / "models" / "pruned" / "random_pruning" / "cifar10"
    assert sorted(p.name for p in specs.glob("*.json")) == sorted(
        f"{net}_{level}.json" for net in ("resnet18", "squeezenet") for level in (0, 50, 90))
    assert not list(specs.parent.glob("*.json"))  # where the original wrote them, not model_path itself
    test_config = device / "configs" / "cifar10" / "squeezenet.ini"
    made = test_config.read_text()
    assert made.startswith("[SQUEEZENET]") and f"'{device}/models/squeezenet_90.json'" in made
    assert not (device / "profiling_csvs").exists()

    # device: the specs copied where device_model_loc says; run the test config, do not make it
    shutil.copytree(specs, device / "models")
    config = device / "config.ini"
    config.write_text(PROFILE.format(create_config=False, run_profiling=True, **values))
    _main(config, device)
    assert test_config.read_text() == made
    for level in (0, 50, 90):
        log = pd.read_csv(device / "profiling_csvs" / "cifar10" / "latency" / f"squeezenet_{level}-gt.csv", sep="|")
        assert sorted(log["bs"]) == [2, 4] and log["passed"].all() and set(log["dataset"]) == {"cifar10"}

    # host again, the whole config: [fingerprint] takes its folders from [create_network_dataset]
    # and the default, saying so, then fits the latency model and evaluates it
    config = host / "config.ini"
    config.write_text(NETWORK_DATASET.format() + "\n" + PROFILE.format(create_config=True, run_profiling=False, **values)
                      + "\n" + FINGERPRINT.format(**values))
    run = _main(config, host)
    notice = [line for line in (run.stdout + run.stderr).splitlines() if "no pruned_models_storedir" in line]
    assert len(notice) == 1
    assert "pruned_models_storedir = models/pruned/random_pruning/cifar10" in notice[0]
    assert "model_storedir = out/fitted" in notice[0]
    fitted = host / "out" / "fitted"
    assert any(fitted.glob("*latency_ms*")) and not any(fitted.glob("*mem_used*"))
    assert test_config.read_text() == made
