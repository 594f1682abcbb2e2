"""The user's own model in hpcbench's trainer (:mod:`hpcbench.train.user_model`): its forms, the
one-line errors, and its provenance; training with it under mpi and ddp, checkpointed and
resumed, is in tests/integration/test_checkpoint_resume.py."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.conftest import need_module

torch = need_module("torch")

from hpcbench.train.config import ConfigError, TrainConfig  # noqa: E402
from hpcbench.train.models import build_model  # noqa: E402
from hpcbench.train.user_model import model_source  # noqa: E402

USER_FILE = Path(__file__).resolve().parents[1] / "integration" / "user_model.py"


@pytest.mark.parametrize(
    "spec", ["tests.integration.user_model:make", f"{USER_FILE}:make"], ids=["module", "file"]
)
def test_a_factory_by_module_or_file_builds_the_users_model_for_the_dataset(spec):
    model = build_model(spec, (1, 12, 16), 9)
    assert type(model).__name__ == "TinyNet"
    assert model(torch.zeros(2, 1, 12, 16)).shape == (2, 9)
    TrainConfig(model=spec).check()  # the form passes the option's rule


@pytest.mark.parametrize(
    "spec, says",
    [
        ("no_such_package.models:make", "cannot import no_such_package.models: "),
        ("/nowhere/model.py:make", "no such file /nowhere/model.py"),
        ("tests.integration.user_model:missing", "tests.integration.user_model has no missing"),
        ("tests.integration.user_model:NOT_CALLABLE", "NOT_CALLABLE is a int, not callable"),
        ("tests.integration.user_model:broken", "raised RuntimeError: the user's factory broke"),
        ("tests.integration.user_model:not_a_model", "returned a str, not a torch.nn.Module"),
    ],
)
def test_what_goes_wrong_with_a_users_model_is_one_line_naming_it(spec, says):
    with pytest.raises(ConfigError) as err:
        build_model(spec, (1, 12, 16), 9)
    message = str(err.value)
    assert message.startswith(f"--model {spec}: ") and says in message, message
    assert "\n" not in message


def test_the_forms_are_told_apart_and_a_width_on_another_model_says_both_ways():
    for good in ("small_cnn", "mlp:64", "resnet18", "pkg.mod:factory", "my model.py:make"):
        TrainConfig(model=good).check()
    with pytest.raises(ConfigError, match="only small_cnn, mlp, rnn take a width .* your own"):
        TrainConfig(model="resnet18:64").check()
    with pytest.raises(ConfigError, match="the width after ':' must be a whole number"):
        TrainConfig(model="mlp:wide").check()


def test_the_provenance_names_the_factory_its_file_and_its_hash():
    found = model_source(f"{USER_FILE}:make")
    assert found == {
        "factory": f"{USER_FILE}:make",
        "file": str(USER_FILE),
        "sha256": hashlib.sha256(USER_FILE.read_bytes()).hexdigest(),
    }
    assert model_source("resnet18") is None
