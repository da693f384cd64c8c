"""The network's weights file: where the shipped one lies, its format version, loading and checking it.

No ``bpy`` here.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .network import NUM_OUTPUTS, POSE_INPUTS, SKELETON_INPUTS, IKNet, num_features
from .skeleton import JOINTS, KEYPOINTS

__all__ = ["WeightsError", "DEFAULT_WEIGHTS", "FORMAT_VERSION", "format_version_problem", "load_network"]


#: Weights shipped with the extension.
DEFAULT_WEIGHTS = Path(__file__).resolve().parent.parent / "weights" / "neural_ik.pt"


#: Weights format version this code reads (2: the network with a temporal block; 1 was per frame only).
FORMAT_VERSION = 2


class WeightsError(ValueError):
    """The weights file is missing, corrupt, of another version or the wrong shape."""


def format_version_problem(path, version) -> str:
    """What is wrong with a weights file of format ``version`` ("" when this code reads it)."""
    if version == FORMAT_VERSION:
        return ""
    older = isinstance(version, int) and version < FORMAT_VERSION
    return (f"{path} has weights format version {version!r}; this version of Neural IK reads version {FORMAT_VERSION}"
            + (" (the old per-frame network)" if version == 1 else "")
            + (": re-train the network (python -m training.train, see weights/MODEL_CARD.md) or download the "
               "weights of this version (reinstall the extension)" if older else
               ": this file is newer than the extension; update Neural IK or use the weights it ships with"))


def load_network(path, device="cpu") -> tuple[IKNet, dict]:
    """Load and validate a weights file; returns ``(network in eval mode, file dict)``.

    Raises
    ------
    WeightsError
        Missing, unreadable/corrupt, wrong format version or wrong shapes.
    """
    path = Path(path)
    if not path.is_file():
        raise WeightsError(f"Neural IK weights not found: {path} (reinstall the extension or pass weights=<file>)")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as ex:  # pickle / zip errors vary
        raise WeightsError(f"cannot read Neural IK weights {path}: the file is corrupt or not a weights file ({type(ex).__name__}: {ex})") from ex
    if not isinstance(blob, dict) or blob.get("format") != "neural_ik":
        raise WeightsError(f"{path} is not a Neural IK weights file (no 'format': 'neural_ik' entry)")
    problem = format_version_problem(path, blob.get("format_version"))
    if problem:
        raise WeightsError(problem)
    if list(blob.get("keypoints", [])) != list(KEYPOINTS) or list(blob.get("joints", [])) != list(JOINTS):
        raise WeightsError(f"{path} was trained for another skeleton (its keypoint/joint lists differ from this version's)")
    hp = blob.get("hparams")
    state = blob.get("state")
    if not isinstance(hp, dict) or not isinstance(state, dict):
        raise WeightsError(f"{path}: missing 'hparams' or 'state'")
    kind = hp.get("skeleton_input", "lengths")   # (format-2 files without the key read lengths)
    if kind not in SKELETON_INPUTS:
        raise WeightsError(f"{path}: unknown skeleton input {kind!r} (this version reads "
                           f"{', '.join(SKELETON_INPUTS)}): update Neural IK or use the weights it ships with")
    pose = hp.get("pose_input", "positions")     # (format-2 files without the key read positions)
    if pose not in POSE_INPUTS:
        raise WeightsError(f"{path}: unknown pose input {pose!r} (this version reads "
                           f"{', '.join(POSE_INPUTS)}): update Neural IK or use the weights it ships with")
    n_in = num_features(kind, pose)
    if blob.get("num_features") != n_in or blob.get("num_outputs") != NUM_OUTPUTS:
        raise WeightsError(f"{path}: wrong input/output size ({blob.get('num_features')}/{blob.get('num_outputs')}, "
                           f"expected {n_in}/{NUM_OUTPUTS})")
    try:
        net = IKNet(int(hp["width"]), int(hp["blocks"]), 0.0, int(hp.get("temporal", 0)),
                    int(hp.get("temporal_channels", 128)), kind, pose)
        state = {k: v.float() for k, v in state.items()}
        net.load_state_dict(state, strict=True)
    except (KeyError, RuntimeError, TypeError, ValueError, AttributeError) as ex:
        raise WeightsError(f"{path}: weights do not fit the network (wrong shape or missing tensors): {ex}") from ex
    for t in net.state_dict().values():
        if not torch.isfinite(t).all():
            raise WeightsError(f"{path}: weights contain NaN or infinite values")
    return net.to(device).eval(), blob
