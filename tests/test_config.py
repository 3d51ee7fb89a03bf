"""Option validation: a wrong type or value is a clear error naming the option and what it accepts,
raised where the option enters (environment, ``options={...}``, ``config.patch``)."""
import pathlib

import pytest
import torch

from neuron_inductor import config
from neuron_inductor.config import Config, ConfigError


@pytest.mark.parametrize("name,value,expect", [
    ("free_chunk", "big", "an int >= 1"),
    ("free_chunk", 0, "an int >= 1"),
    ("free_chunk", 2.5, "an int >= 1"),
    ("free_chunk", True, "an int >= 1"),
    ("cache_dir", 5, "a path"),
    ("debug_dir", "", "a path"),
    ("fusion", "no", "True or False"),
    ("fusion", 1, "True or False"),
    ("cache", None, "True or False"),
    ("verify_ir", "False", "True or False"),
    ("cache_max_bytes", -1, "an int >= 0"),
    ("cache_lock_timeout", "10", "an int >= 0"),
    ("target", "trn9", "'trn1', 'trn2'"),
    ("fallback", None, "'warn', 'silent', 'error'"),
    ("runtime", 3, "'auto', 'simulator', 'device'"),
])
def test_bad_option_is_named_with_valid_values(name, value, expect):
    with pytest.raises(ConfigError, match=rf"option {name}=.*expected .*{expect}"):
        Config().replace(**{name: value})
    with pytest.raises(ConfigError, match=rf"option {name}="):
        with config.patch(**{name: value}):
            pass  # pragma: no cover - never entered


def test_good_options_pass_and_paths_normalise(tmp_path):
    cfg = Config().replace(fusion=False, free_chunk=512, cache_dir=pathlib.Path(tmp_path), target="trn1")
    assert cfg.fusion is False and cfg.free_chunk == 512 and cfg.target == "trn1"
    assert cfg.cache_dir == str(tmp_path) and isinstance(cfg.cache_dir, str)


def test_unknown_option_lists_valid_ones():
    with pytest.raises(ConfigError, match="unknown neuron_inductor option.*'fusionx'.*valid options.*fusion"):
        Config().replace(fusionx=True)


@pytest.mark.parametrize("raw,value", [("1", True), ("TRUE", True), (" yes ", True), ("On", True),
                                       ("0", False), ("false", False), ("NO", False), ("off", False)])
def test_env_boolean_spellings(monkeypatch, raw, value):
    monkeypatch.setenv("NEURON_INDUCTOR_FUSION", raw)
    assert Config.from_env().fusion is value


@pytest.mark.parametrize("var,raw,expect", [
    ("NEURON_INDUCTOR_FUSION", "nope", "NEURON_INDUCTOR_FUSION='nope'.*option fusion.*yes"),
    ("NEURON_INDUCTOR_FUSION", "2", "option fusion"),
    ("NEURON_INDUCTOR_FREE_CHUNK", "big", "NEURON_INDUCTOR_FREE_CHUNK='big'.*option free_chunk.*int >= 1"),
    ("NEURON_INDUCTOR_FREE_CHUNK", "-4", "option free_chunk=-4.*int >= 1"),
    ("NEURON_INDUCTOR_TARGET", "trn9", "option target='trn9'"),
])
def test_bad_env_is_named(monkeypatch, var, raw, expect):
    monkeypatch.setenv(var, raw)
    with pytest.raises(ConfigError, match=expect):
        Config.from_env()


def test_env_empty_means_default(monkeypatch):
    monkeypatch.setenv("NEURON_INDUCTOR_FREE_CHUNK", "")
    assert Config.from_env().free_chunk == 2048


@pytest.mark.parametrize("options,expect", [({"free_chunk": "big"}, "option free_chunk='big'"),
                                            ({"cache_dir": 5}, "option cache_dir=5"),
                                            ({"fusion": "no"}, "option fusion='no'")])
def test_torch_compile_options_error_at_first_call(options, expect):
    """torch gives a backend its options only when it compiles the first graph, so that is where the
    error surfaces: as Dynamo's BackendCompilerFailed carrying our message, not a declared fallback."""
    torch._dynamo.reset()
    f = torch.compile(lambda x: x * 2 + 1, backend="neuron", options=options)
    with pytest.raises(Exception, match=expect) as info:
        f(torch.randn(4))
    assert "internal error" not in str(info.value)
