"""The network's weights file: where the shipped one lies, its format version, loading and checking it.

:func:`load_weights` reads and checks a file into numpy arrays without
torch (:mod:`.weights_file`); :func:`load_network` builds the torch network
from them.

No ``bpy`` here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .features import NUM_OUTPUTS, POSE_INPUTS, SKELETON_INPUTS, num_features
from .skeleton import JOINTS, KEYPOINTS
from .weights_file import read_torch_file

__all__ = ["WeightsError", "DEFAULT_WEIGHTS", "FORMAT_VERSION", "format_version_problem", "load_weights",
           "load_network", "build_network", "layer_shapes", "read_with_torch"]


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


def layer_shapes(hp: dict, n_in: int) -> dict:
    """The shape of every per-frame tensor of a network with hyperparameters ``hp`` and ``n_in`` features
    (a temporal block's tensors are checked where the torch network loads them)."""
    w = int(hp["width"])
    shapes = {"feat_mean": (n_in,), "feat_std": (n_in,), "inp.weight": (w, n_in), "inp.bias": (w,),
              "norm.weight": (w,), "norm.bias": (w,), "out.weight": (NUM_OUTPUTS, w), "out.bias": (NUM_OUTPUTS,)}
    for i in range(int(hp["blocks"])):
        for name, shape in (("norm.weight", (w,)), ("norm.bias", (w,)), ("fc1.weight", (w, w)), ("fc1.bias", (w,)),
                            ("fc2.weight", (w, w)), ("fc2.bias", (w,))):
            shapes[f"blocks.{i}.{name}"] = shape
    return shapes


def read_with_torch(path):
    """The file through ``torch.load(weights_only=True)``, its tensors as numpy arrays; ``None`` where
    it is no zip archive (no ``torch.save`` file: importing torch would not help), torch is not
    installed or cannot read it either."""
    import importlib.util
    import zipfile

    if not zipfile.is_zipfile(path) or importlib.util.find_spec("torch") is None:
        return None
    try:
        import torch

        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # (torch's own errors vary: the caller reports the reader's)
        return None

    def plain(x):
        if isinstance(x, torch.Tensor):
            return x.detach().float().numpy() if x.dtype == torch.bfloat16 else x.detach().numpy()
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(plain(v) for v in x)
        return x

    return plain(blob)


def load_weights(path) -> dict:
    """Read and check a weights file without torch; returns its dict, ``"state"`` as float32 numpy arrays.

    Raises
    ------
    WeightsError
        Missing, unreadable/corrupt, wrong format version, wrong shapes or
        values that are not finite.
    """
    path = Path(path)
    if not path.is_file():
        raise WeightsError(f"Neural IK weights not found: {path} (reinstall the extension or pass weights=<file>)")
    try:
        blob = read_torch_file(path)
    except ValueError as ex:
        blob = read_with_torch(path)   # (a file of another torch version may pickle what the reader does not know)
        if blob is None:
            raise WeightsError(f"cannot read Neural IK weights {path}: the file is corrupt or not a weights "
                               f"file ({ex})") from ex
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
        expected = layer_shapes(hp, n_in)
        state = {k: np.asarray(v, dtype=np.float32) for k, v in state.items()}
        wrong = [k for k, shape in expected.items() if k not in state or state[k].shape != shape]
    except (KeyError, TypeError, ValueError) as ex:
        raise WeightsError(f"{path}: weights do not fit the network (wrong shape or missing tensors): {ex}") from ex
    if wrong:
        raise WeightsError(f"{path}: weights do not fit the network (wrong shape or missing tensors): "
                           f"{', '.join(wrong[:4])}")
    if not all(np.isfinite(v).all() for v in state.values()):
        raise WeightsError(f"{path}: weights contain NaN or infinite values")
    return dict(blob, state=state, hparams=dict(hp, skeleton_input=kind, pose_input=pose))


def build_network(blob: dict, path, device="cpu"):
    """The torch network (eval mode, on ``device``) of a checked weights file's dict (:func:`load_weights`).

    Raises
    ------
    WeightsError
        Tensors the torch network does not have, or of other shapes.
    """
    import torch

    from .network import IKNet

    hp = blob["hparams"]
    try:
        net = IKNet(int(hp["width"]), int(hp["blocks"]), 0.0, int(hp.get("temporal", 0)),
                    int(hp.get("temporal_channels", 128)), hp["skeleton_input"], hp["pose_input"])
        net.load_state_dict({k: torch.from_numpy(v) for k, v in blob["state"].items()}, strict=True)
    except (KeyError, RuntimeError, TypeError, ValueError, AttributeError) as ex:
        raise WeightsError(f"{path}: weights do not fit the network (wrong shape or missing tensors): {ex}") from ex
    return net.to(str(device)).eval()


def load_network(path, device="cpu"):
    """Load and validate a weights file; returns ``(torch network in eval mode, file dict)``.

    Raises
    ------
    WeightsError
        As :func:`load_weights`, or tensors the torch network does not have.
    """
    blob = load_weights(path)
    return build_network(blob, path, device), blob
