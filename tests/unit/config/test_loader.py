"""Loading config files: paths anchored at the config's folder, datasets by their real path,
several configs at once, the decode_resize section, a full example config."""

import pytest

from sandfs.config.loader import ConfigError, load_task_config, load_task_configs
from tests.helpers.config_texts import BASE, edited, load

FULL_EXAMPLE = """\
task: slowfast_k400
seed: 0
epochs: 100
dataset:
  tag: train
  input_source: file
  video_dataset_path: /data/k400/train
  extensions: [.MP4, .webm, .mkv, .avi, .mp4]
  labels: dirname
  sampling:
    videos_per_batch: 8
    frames_per_video: 32
    frame_stride: 2
    samples_per_video: 1
    drop_last: false
  augmentation:
    - name: resize
      branch_type: single
      inputs: [frame]
      outputs: [resized]
      config:
        - resize: {shape: [256, 320], interpolation: bilinear}
    - name: maybe_flip
      branch_type: random
      inputs: [resized]
      outputs: [flipped]
      branches:
        - prob: 0.5
          config: [{flip: {direction: horizontal}}]
        - prob: 0.5
          config: []
    - name: crop
      branch_type: single
      inputs: [flipped]
      outputs: [cropped]
      config:
        - random_crop: {size: [224, 224]}
engine:
  mountpoint: /mnt/sand
  cache_dir: /local/nvme/sand
  storage_budget: 200G
  k_epochs: 5
  workers: auto
"""

# Figure 9 of the paper, with its typos fixed: quoted strings, `inv_sample: true`, `config: None`.

def test_a_full_config_loads():
    config = load(FULL_EXAMPLE)
    dataset = config.dataset
    assert (config.task, config.seed, config.epochs) == ("slowfast_k400", 0, 100)
    assert dataset.extensions == (".mp4", ".webm", ".mkv", ".avi")  # lowered, deduplicated
    assert dataset.labels == "dirname"
    assert dataset.sampling.frame_stride == 2
    assert dataset.sampling.short_video == "repeat_last"
    assert dataset.sampling.layout == "NTHWC"
    resize, flip, crop = dataset.augmentation
    assert resize.ops[0].name == "resize"
    assert resize.ops[0].param_dict()["shape"] == (256, 320)
    assert [b.prob for b in flip.branches] == [0.5, 0.5]
    assert flip.branches[1].ops == ()
    assert crop.ops[0].param_dict() == {"size": (224, 224)}
    assert config.engine.storage_budget_bytes == 200 * 2**30
    assert config.engine.workers is None
    assert config.engine_given == {
        "mountpoint",
        "cache_dir",
        "storage_budget_bytes",
        "k_epochs",
        "workers",
    }
    assert hash(config) == hash(load(FULL_EXAMPLE))


def test_paths_resolve_against_the_config_folder_and_are_checked(tmp_path):
    (tmp_path / "videos").mkdir()
    (tmp_path / "labels.csv").write_text("video,label\n")
    config_file = tmp_path / "task.yaml"
    text = edited(
        ("tag: train", "tag: train\n  labels: labels.csv"),
        ("storage_budget: 1G", "cache_dir: cache"),
    )
    config = load_task_config(config_file, text=text)
    assert config.dataset.video_dataset_path == str(tmp_path / "videos")
    assert config.dataset.labels == str(tmp_path / "labels.csv")
    assert config.engine.cache_dir == str(tmp_path / "cache")
    (tmp_path / "labels.csv").unlink()
    with pytest.raises(ConfigError, match=r"task.yaml:6:11: dataset.labels: the labels file"):
        load_task_config(config_file, text=text)
    (tmp_path / "videos").rmdir()
    with pytest.raises(ConfigError, match=r":7:23: dataset.video_dataset_path: .* does not exist"):
        load_task_config(config_file, text=text)
    (tmp_path / "videos").write_text("")
    with pytest.raises(ConfigError, match="is not a directory"):
        load_task_config(config_file, text=text)


def test_a_dataset_reached_through_a_symlink_is_its_real_directory(tmp_path):
    """The dataset path seeds the draws and decides sharing: a symlink must not make the same
    data another dataset."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    text = edited(("video_dataset_path: videos ", "video_dataset_path: link "))
    config = load_task_config(tmp_path / "task.yaml", text=text)
    assert config.dataset.video_dataset_path == str(tmp_path / "real")


def test_duplicate_task_names_point_at_the_second_file(tmp_path):
    paths = []
    for name in ("one.yaml", "two.yaml"):
        path = tmp_path / name
        path.write_text(edited(("seed: 0", "seed: 1")) if name == "two.yaml" else BASE)
        paths.append(path)
    with pytest.raises(ConfigError) as info:
        load_task_configs(paths, check_paths=False)
    assert str(info.value).startswith(f"{paths[1]}:1:7: task: task name 'demo' is already used")
    assert str(paths[0]) in info.value.message
    renamed = tmp_path / "three.yaml"
    renamed.write_text(edited(("task: demo", "task: other")))
    configs = load_task_configs([paths[0], renamed], check_paths=False)
    assert [c.task for c in configs] == ["demo", "other"]
    assert configs[0].dataset == configs[1].dataset  # the data section, not the name


def test_decode_resize_fixes_the_source_size(tmp_path):
    from tests.helpers.harness import task_config, write_config

    flip_only = [{"name": "flip", "branch_type": "single", "inputs": ["frame"],
                  "outputs": ["f"], "config": [{"flip": {"direction": "horizontal"}}]}]
    ok = write_config(tmp_path / "ok.yaml", task_config(
        tmp_path, augmentation=flip_only, sampling={"decode_resize": {"shape": [36, 48]}}))
    cfg = load_task_config(ok, check_paths=False)
    assert cfg.dataset.sampling.decode_resize == ((36, 48), "bilinear")
    no_size = write_config(tmp_path / "no.yaml", task_config(tmp_path, augmentation=flip_only))
    with pytest.raises(ConfigError, match="batches stack"):
        load_task_config(no_size, check_paths=False)
    for bad, fragment in (({"shape": [36]}, "expected"), ({"shape": [0, 4]}, "at least 1"),
                          ({"shape": [8, 8], "interpolation": "lanczos"}, "one of"),
                          ({"size": 8}, "shape")):
        path = write_config(tmp_path / "bad.yaml", task_config(
            tmp_path, sampling={"decode_resize": bad}))
        with pytest.raises(ConfigError, match=fragment) as caught:
            load_task_config(path, check_paths=False)
        assert "dataset.sampling.decode_resize" in str(caught.value)
