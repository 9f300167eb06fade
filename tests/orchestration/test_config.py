from __future__ import annotations

import pytest
import yaml

from core.schema import dump_yaml
from orchestration.config import ConfigError, load_config
from pipelines.source_config import DEFAULT_BIBLE_VERSIONS, BibleSource, TextSource


def write(tmp_path, text: str):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


def test_defaults_are_the_six_language_bible():
    cfg = load_config()
    assert cfg.prepare.languages == ["en", "fr", "es", "ru", "ar", "zh"]
    assert isinstance(cfg.prepare.sources[0], BibleSource)
    assert cfg.prepare.sources[0].versions == DEFAULT_BIBLE_VERSIONS
    assert cfg.prepare.spm.vocab_size == 20000
    assert cfg.prepare.filters.max_words == 50


def test_file_values_and_command_line_overrides(tmp_path):
    path = write(
        tmp_path,
        """
name: small
prepare:
  sources:
    - {kind: text, path: "data/corpus.{lang}", languages: [en, fr]}
  spm: {vocab_size: 8000}
""",
    )
    cfg = load_config(
        path,
        [
            "prepare.spm.vocab_size=4000",
            "prepare.normalize.lowercase=false",
            "prepare.split.dev_fraction=0.1",
            "prepare.split.test_fraction=0.1",
        ],
    )
    assert cfg.name == "small"
    assert isinstance(cfg.prepare.sources[0], TextSource)
    assert cfg.prepare.spm.vocab_size == 4000
    assert cfg.prepare.normalize.lowercase is False
    assert cfg.prepare.split.by_fraction


def test_unknown_key_names_key_file_and_line(tmp_path):
    path = write(tmp_path, "name: x\nprepare:\n  spm:\n    vocab_sise: 8000\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert "prepare.spm.vocab_sise: unknown key" in str(err.value)
    assert f"{path}:4" in str(err.value)


def test_unknown_key_on_command_line():
    with pytest.raises(ConfigError, match=r"prepare\.spn: unknown key .*command line"):
        load_config(None, ["prepare.spn.vocab_size=3"])


@pytest.mark.parametrize(
    "override, key",
    [
        ("prepare.spm.vocab_size=big", "prepare.spm.vocab_size"),
        ("prepare.spm.vocab_size=12.5", "prepare.spm.vocab_size"),
        ("prepare.normalize.lowercase=[1]", "prepare.normalize.lowercase"),
        ("prepare.output.train_shards=-4", "prepare.output.train_shards"),
        ("prepare.split.dev_size=-1", "prepare.split.dev_size"),
        ("prepare.filters.min_script_fraction=1.5", "prepare.filters.min_script_fraction"),
        ("serve.max_queued_requests=0", "serve.max_queued_requests"),  # Ray Serve's deployment refuses it at start
    ],
)
def test_wrong_types_and_impossible_values(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(None, [override])


def test_fractions_must_leave_a_training_split():
    with pytest.raises(ConfigError, match="below 1"):
        load_config(None, ["prepare.split.dev_fraction=0.6", "prepare.split.test_fraction=0.5"])


def test_unknown_source_kind(tmp_path):
    path = write(tmp_path, "prepare:\n  sources:\n    - {kind: csv, path: x.csv}\n")
    with pytest.raises(ConfigError, match=r"prepare\.sources\.0.*'bible', 'text', 'tsv', 'jsonl'"):
        load_config(path)


@pytest.mark.parametrize("kind", ["mined", "text"])
def test_a_bad_field_of_a_source_names_its_key_and_line_whatever_the_kind(tmp_path, kind):
    path = write(
        tmp_path,
        f"""name: x
prepare:
  sources:
    - kind: {kind}
      path: "pairs.{{lang}}"
      languages: [fr, en]
      min_scor: 1.1
""",
    )
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert f"prepare.sources.0.min_scor: unknown key (check its spelling and section) [{path}:7]" in str(err.value)


def test_a_value_is_blamed_on_where_it_was_given(tmp_path):
    path = write(
        tmp_path,
        """name: x
prepare:
  sources:
    - kind: text
      path: "c.{lang}"
      languages: [en, fr]
  split: {dev_fraction: 0.6}
""",
    )
    duplicate = "prepare.sources=[{kind: text, path: 'c.{lang}', languages: [en, en]}]"
    for config_file in (path, None):  # over a file's list, and over the defaults: the command line's
        with pytest.raises(ConfigError) as err:
            load_config(config_file, [duplicate])
        assert "prepare.sources.0.languages: Value error, language 'en' is given twice [command line]" in str(err.value)
    with pytest.raises(ConfigError) as err:  # a section's check over a file value and an override: both
        load_config(path, ["prepare.split.test_fraction=0.5"])
    assert f"prepare.split: Value error, dev_fraction + test_fraction must be below 1 [{path}:7, command line]" in str(
        err.value
    )
    path.write_text("prepare:\n  spm:\n    vocab_size: 5\n")
    with pytest.raises(ConfigError) as err:  # the file's own value, beside an override of its section
        load_config(path, ["prepare.spm.character_coverage=1.0"])
    assert f"prepare.spm.vocab_size: Input should be greater than or equal to 100 (got 5) [{path}:3]" in str(err.value)


def test_a_key_that_moved_is_blamed_on_where_it_was_given(tmp_path):
    path = write(tmp_path, "name: x\ntrain:\n  num_workers: 0\n")  # now runtime.num_workers
    with pytest.raises(ConfigError, match=rf"runtime\.num_workers: .* \(got 0\) \[{path}:3\]"):
        load_config(path)
    with pytest.raises(ConfigError, match=r"runtime\.num_workers: .* \(got 0\) \[command line\]"):
        load_config(None, ["train.num_workers=0"])


def test_language_given_twice(tmp_path):
    path = write(tmp_path, "prepare:\n  sources:\n    - {kind: text, path: 'c.{lang}', languages: [en, fr, en]}\n")
    with pytest.raises(ConfigError, match="language 'en' is given twice"):
        load_config(path)


def test_text_template_needs_lang(tmp_path):
    with pytest.raises(ConfigError, match=r"must contain '\{lang\}'"):
        load_config(None, ["prepare.sources=[{kind: text, path: corpus.txt, languages: [en, fr]}]"])


def test_bad_yaml_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "prepare: [unclosed\n"))
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(write(tmp_path, "- a\n- b\n"))


def test_malformed_override():
    with pytest.raises(ConfigError, match="section.key=value"):
        load_config(None, ["prepare.spm"])


def test_resolved_config_round_trips(tmp_path):
    cfg = load_config(None, ["prepare.spm.vocab_size=1234"])
    path = write(tmp_path, dump_yaml(cfg.to_dict()))
    again = load_config(path)
    assert again == cfg
    assert yaml.safe_load(path.read_text())["prepare"]["spm"]["vocab_size"] == 1234


def test_how_it_runs_is_apart_from_what_is_learned():
    cfg = load_config(None, ["runtime.num_workers=4", "runtime.use_gpu=true", "registry.min_improvement=0.01"])
    assert cfg.runtime.num_workers == 4 and cfg.runtime.use_gpu and cfg.registry.min_improvement == 0.01
    learned = set(cfg.train.model_dump())
    assert not learned & set(cfg.runtime.model_dump())  # no key in both: no exclusion list to keep
    with pytest.raises(ConfigError, match="registry.min_improvement"):
        load_config(None, ["registry.min_improvement=2"])


def test_keys_that_moved_still_load_from_old_configs_and_model_directories(tmp_path, caplog):
    path = write(
        tmp_path,
        """
train:
  lr: 0.01
  num_workers: 2
  checkpoint_every_steps: 50
evaluate:
  embed_actors: 3
tracking:
  registered_model: prod
  min_improvement: 0.02
""",
    )
    cfg = load_config(path, ["train.use_gpu=true"])
    assert cfg.train.lr == 0.01 and cfg.runtime.num_workers == 2 and cfg.runtime.checkpoint_every_steps == 50
    assert cfg.runtime.use_gpu and cfg.runtime.embed_actors == 3
    assert cfg.registry.model_name == "prod" and cfg.registry.min_improvement == 0.02
    assert "train.num_workers -> runtime.num_workers" in caplog.text and "run.yaml" in caplog.text
    # the new place wins over the old one
    assert load_config(None, ["train.num_workers=2", "runtime.num_workers=3"]).runtime.num_workers == 3


def test_numbers_in_exponent_notation_are_numbers_and_infinities_are_refused(tmp_path):
    cfg = load_config(write(tmp_path, "train:\n  lr: 3e-4\n  min_lr: 1E-6\n"), ["model.dropout=1e-1"])
    assert (cfg.train.lr, cfg.train.min_lr, cfg.model.dropout) == (3e-4, 1e-6, 0.1)
    with pytest.raises(ConfigError, match=r"prepare.spm.temperature: Input should be a finite number"):
        load_config(None, ["prepare.spm.temperature=.inf"])
