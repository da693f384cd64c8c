"""Deeply nested JSON (a keypoint file, a mapping preset) is refused with a message, in the UI as in the CLI."""

import pytest

from neural_ik.readers import KeypointReadError, read_keypoints
from neural_ik.retarget.presets import load_preset


@pytest.fixture
def deep(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100000 + "]" * 100000)
    return path


def test_deep_json_is_refused_everywhere(deep):
    with pytest.raises(KeypointReadError, match="nested too deeply"):
        read_keypoints(deep)
    with pytest.raises(ValueError, match="nested too deeply"):
        load_preset(deep)
