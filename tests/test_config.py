import dataclasses
from pathlib import Path

import pytest
import yaml

from gpucurate.config import Config, load_config, parse_override, resolve_config
from gpucurate.errors import ConfigError
from gpucurate.stages.sketches import optimal_bands_rows

ROOT = Path(__file__).resolve().parents[1]


def test_default_yaml_lists_exactly_the_dataclass_defaults():
    assert yaml.safe_load((ROOT / "configs" / "default.yaml").read_text()) == Config().to_dict()


@pytest.mark.parametrize("name", ["default.yaml", "cjk.yaml", "rag-archive.yaml", "web-crawl.yaml"])
def test_shipped_configs_load(name):
    assert isinstance(load_config(ROOT / "configs" / name), Config)


def test_overrides_parse_values_as_yaml():
    cfg = load_config(None, ["fuzzy.threshold=0.85", "input.id_field=null", "normalize.boilerplate_patterns=[a, b]",
                             "fuzzy.verify=false"])
    assert cfg.fuzzy.threshold == 0.85 and cfg.input.id_field is None and cfg.fuzzy.verify is False
    assert cfg.normalize.boilerplate_patterns == ["a", "b"]
    assert parse_override("run.scheduler=tcp://127.0.0.1:8786") == ("run", "scheduler", "tcp://127.0.0.1:8786")


def test_resolve_config_copies_the_base():
    base = Config()
    cfg = resolve_config(base, {"fuzzy.threshold": 0.9})
    assert cfg.fuzzy.threshold == 0.9 and base.fuzzy.threshold == 0.8


@pytest.mark.parametrize("override,needle", [
    ("fuzzy.threshold=0", "fuzzy.threshold"), ("fuzzy.ngram=0", "fuzzy.ngram"), ("fuzzy.verify=maybe", "fuzzy.verify"),
    ("fuzzy.shingle=byte", "fuzzy.shingle"), ("nosuch.key=1", "nosuch"), ("fuzzy=1", "section.key"),
    ("fuzzy.bands=4", "together"), ("fuzzy.fp_weight=0.3", "together"), ("output.soft_weight=2", "soft_weight"),
    ("run.workers=0", "run.workers"), ("input.on_error=ignore", "input.on_error"),
])
def test_invalid_values_name_the_key(override, needle):
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        load_config(None, [override])


def test_invalid_yaml_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("fuzzy: [unclosed\n")
    with pytest.raises(ConfigError, match="bad.yaml"):
        load_config(bad)


def test_lsh_parameters_match_datasketch_choice():
    datasketch = pytest.importorskip("datasketch.lsh")
    for threshold in (0.5, 0.7, 0.8, 0.9):
        for num_perm in (64, 128, 256):
            assert optimal_bands_rows(threshold, num_perm, 0.5, 0.5) == \
                datasketch._optimal_param(threshold, num_perm, 0.5, 0.5)


def test_every_config_section_is_a_dataclass():
    for f in dataclasses.fields(Config):
        assert dataclasses.is_dataclass(getattr(Config(), f.name))
