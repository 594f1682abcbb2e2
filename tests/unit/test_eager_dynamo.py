"""A training process that compiles nothing leaves PyTorch's compiler unloaded
(:mod:`hpcbench.train.eager_dynamo`), learns bit for bit what it learns with the compiler loaded,
and a later compile in the same process gets the real compiler, with what PyTorch marked as not
to be compiled still marked. Each case is a fresh interpreter (the module table is per process):
real torch, a real gloo process group and DistributedDataParallel, the real trainer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcbench.train.eager_dynamo import OFF_VARIABLE, wanted
from tests.conftest import need_module

need_module("torch")

# An eager DDP training (a gloo world of one) with everything an eager run calls: momentum SGD's
# steps, zero_grad, the optimizer's state_dict and load_state_dict, a process group's start.
EAGER_STEPS = """
import hashlib, json, os, sys, tempfile
import torch
from hpcbench.train.eager_dynamo import defer
deferred = defer() if sys.argv[1] == "defer" else False
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
dist.init_process_group("gloo", store=store, rank=0, world_size=1)
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(),
                                                    torch.nn.Linear(5, 3)))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
x, y = torch.randn(16, 6), torch.randint(0, 3, (16,))
for step in range(4):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    if step == 1:
        opt.load_state_dict(opt.state_dict())
dist.destroy_process_group()
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters()))
print(json.dumps({"deferred": deferred, "weights": digest.hexdigest(),
                  "compiler_loaded": "torch._dynamo.eval_frame" in sys.modules}))
"""

LATER_COMPILE = """
import json, sys, torch
from hpcbench.train.eager_dynamo import defer, loaded
assert defer()
def plus(x):
    return x + 1
marked = torch._dynamo.disable(plus)  # what the stand-in handed out
model = torch.nn.Linear(3, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
model(torch.ones(4, 3)).sum().backward()
opt.step()
before = loaded()
out = {"loaded_before": before}
class Net(torch.nn.Module):  # a module marked not to be compiled stays a module (its parameters)
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(2, 2)
        self.head = torch.compiler.disable(torch.nn.Linear(2, 2))
out["parameters"] = len(list(Net().parameters()))
out["plain"] = torch.compile(lambda x: plus(x) * 2, fullgraph=True, backend="eager")(
    torch.ones(2)).tolist()
out["loaded_after"] = loaded()
out["in_place"] = torch._dynamo is sys.modules["torch._dynamo"] and hasattr(torch._dynamo, "optimize")
for name, fn in [("marked", lambda x: marked(x) * 2), ("zero_grad", lambda x: opt.zero_grad())]:
    try:
        torch.compile(fn, fullgraph=True, backend="eager")(torch.ones(2))
        out[name] = "compiled"
    except Exception as err:
        out[name] = type(err).__name__
print(json.dumps(out))
"""


# The real compiler arriving while the stand-in is in place by the way that could make two of
# its modules: a submodule's import (Python asks the stand-in for __path__, which loads the
# package, which imports that submodule itself), from four threads at once. Then torchvision
# and --deterministic's PyTorch call, which import submodules of it too.
ARRIVALS = """
import gc, importlib.util, inspect, json, sys, threading, types
import torch
from hpcbench.train.eager_dynamo import defer, loaded
assert defer()
opt = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
opt.zero_grad()
hasattr(torch._dynamo, "__wrapped__")
inspect.getmodule(opt.zero_grad)
out = {"spec": importlib.util.find_spec("torch._dynamo").name, "probes_load": loaded()}
got = []
def arrive():
    import torch._dynamo.config as config
    got.append(config)
threads = [threading.Thread(target=arrive) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
import torchvision
torch.use_deterministic_algorithms(True)
dyn = sys.modules["torch._dynamo"]
out["one_config"] = len(got) == 4 and all(c is dyn.config for c in got)
out["one_utils"] = dyn.utils is sys.modules["torch._dynamo.eval_frame"].utils
names = [m.__name__ for m in gc.get_objects() if isinstance(m, types.ModuleType)
         and m.__name__.startswith("torch._")]
out["copies"] = sorted({n for n in names if names.count(n) > 1})
dyn.config.optimize_ddp = "python_reducer"  # read by DDP through utils: the same config
out["ddp_mode"] = torch._dynamo.utils.get_optimize_ddp_mode()
marked = torch.optim.Optimizer.zero_grad.__wrapped__.__dict__["__dynamo_disable"]
out["redisabled"] = getattr(marked, "_torchdynamo_disable", False)
hooks = importlib.reload(sys.modules["torch._dynamo.hooks"])  # the usual finders reload it
out["reloaded"] = hooks.__spec__ is not None and hooks.__spec__.origin.endswith("hooks.py")
print(json.dumps(out))
"""


def python(code: str, *args: str, env: dict | None = None, cwd: Path | None = None) -> dict:
    r = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_an_eager_ddp_training_never_loads_the_compiler_and_learns_bit_for_bit_the_same():
    deferred = python(EAGER_STEPS, "defer")
    plain = python(EAGER_STEPS, "plain")
    assert deferred["deferred"] and not deferred["compiler_loaded"]
    assert plain["compiler_loaded"]  # what PyTorch does by itself: the stand-in saves that
    assert deferred["weights"] == plain["weights"]


def test_a_later_compile_loads_the_real_compiler_and_what_was_marked_stays_uncompiled():
    out = python(LATER_COMPILE)
    assert out["loaded_before"] is False
    assert out["parameters"] == 4  # as PyTorch gives: disable() of a module is the real one's
    assert out["plain"] == [4.0, 4.0] and out["loaded_after"] and out["in_place"]
    # disabled functions handed out before the real compiler came cannot be compiled into one
    # graph (PyTorch's own marks, as on the optimizer's zero_grad, too)
    assert out["marked"] == out["zero_grad"] == "Unsupported"


def test_the_real_compiler_arriving_any_way_is_one_module_and_takes_over_what_was_disabled():
    out = python(ARRIVALS)
    # probing the stand-in (hasattr, inspect, find_spec) loads nothing
    assert out["spec"] == "torch._dynamo" and out["probes_load"] is False
    assert out["one_config"] and out["one_utils"] and out["copies"] == []
    assert out["ddp_mode"] == "python_reducer"
    # the optimizer's zero_grad, disabled by the stand-in, is now disabled by the real module
    assert out["redisabled"] is True
    assert out["reloaded"]  # a reload of one of its modules is Python's as usual


def test_a_compiler_that_import_torch_already_loaded_is_left_in_place(tmp_path: Path):
    """``TORCH_COMPILE_DEBUG=1`` makes ``import torch`` load the compiler: nothing is deferred,
    and what needs the compiler (non-reentrant activation checkpointing reads its config)
    finds it."""
    code = (
        "import json, torch\n"
        "from hpcbench.train.eager_dynamo import defer\n"
        "deferred = defer()\n"
        "x = torch.ones(1, 2, requires_grad=True)\n"
        "torch.utils.checkpoint.checkpoint(torch.nn.Linear(2, 2), x, use_reentrant=False)\n"
        "print(json.dumps({'deferred': deferred, 'real': type(torch._dynamo).__name__}))"
    )
    env = {**os.environ, "TORCH_COMPILE_DEBUG": "1"}
    assert python(code, env=env, cwd=tmp_path) == {"deferred": False, "real": "module"}


@pytest.mark.parametrize(
    "environ,expected",
    [
        ({}, True),
        ({OFF_VARIABLE: "1"}, True),
        ({OFF_VARIABLE: "0"}, False),
        ({OFF_VARIABLE: "0", "TORCH_HOME": "/x"}, False),
        ({"TORCHINDUCTOR_COMPILE_THREADS": "1"}, True),  # the compiler's own: act when compiling
    ],
)
def test_the_environment_can_keep_the_compiler_as_pytorch_loads_it(environ, expected):
    assert wanted(environ) is expected


def test_the_trainers_own_process_defers_and_a_notebooks_process_keeps_pytorch_as_it_is(
    tmp_path: Path,
):
    from hpcbench.data_prep import ConvertOptions, convert, synthetic

    data = tmp_path / "shapes"
    convert(synthetic(120, 3), data, ConvertOptions(size=(8, 8), grayscale=True, progress=False))
    run = """
import gc, json, sys, types
from hpcbench.train.__main__ import main
status = main(sys.argv[1:])
names = [m.__name__ for m in gc.get_objects() if isinstance(m, types.ModuleType)
         and m.__name__.startswith("torch._")]
print(json.dumps({"status": status, "compiler_loaded": "torch._dynamo.eval_frame" in sys.modules,
                  "copies": sorted({n for n in names if names.count(n) > 1})}))
"""
    args = ["--data", str(data), "--epochs", "1", "--global-batch-size", "16", "--max-steps", "2"]
    args += ["--model", "small_cnn", "--progress", "none", "--output-dir", str(tmp_path / "run")]
    eager = python(run, *args)
    assert eager == {"status": 0, "compiler_loaded": False, "copies": []}
    # --deterministic's PyTorch call loads the compiler mid-run (through a submodule's import
    # from the stand-in's place): the run goes on, with one copy of each of its modules
    loads = python(run, *args[:-1], str(tmp_path / "run-deterministic"), "--deterministic")
    assert loads == {"status": 0, "compiler_loaded": True, "copies": []}
    # in a notebook's process (run_training called directly) PyTorch stays as it is
    direct = python(
        "import json, sys\nfrom hpcbench.train.entry import run_training\n"
        "run_training(sys.argv[1:])\n"
        "print(json.dumps({'compiler_loaded': 'torch._dynamo.eval_frame' in sys.modules}))",
        *args[:-1],
        str(tmp_path / "run2"),
    )
    assert direct == {"compiler_loaded": True}
