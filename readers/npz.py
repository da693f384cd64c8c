"""``.npz`` (the Neural IK interchange format) and bare ``.npy`` arrays.

The ``.npz`` keypoint format
----------------------------
A NumPy ``.npz`` archive (``np.savez`` / ``np.savez_compressed``), read
without pickle, with these arrays:

``positions`` (required)
    float array, shape ``(T, J, 3)``: point positions per frame. NaN marks
    a missing point.
``joint_names`` (required)
    string array, shape ``(J,)``: one unique name per point. Names of a
    known layout (``canonical``, ``mediapipe_pose``, ``coco17``, ``smpl24``,
    ``mixamo``...) are recognised; others need a layout mapping.
``fps`` (required)
    scalar: frames per second.
``confidence`` (optional)
    float array, shape ``(T, J)``, in [0, 1].
``parents`` (optional)
    int array, shape ``(J,)``: each joint's parent index, -1 for the root.
    Joint names no layout knows (a studio rig's: ``Hips``, ``UpperArm_L``...)
    are read by the skeleton mapper with this hierarchy (without it, with
    the one the motion shows).
``units`` (optional)
    ``"m"``, ``"cm"`` or ``"mm"``. Without it the units are guessed from the
    body's size (a human-sized body in metres reads as metres) and a warning
    says so.
``up_axis`` (optional)
    ``"Z"`` (Blender) or ``"Y"`` (Y up, the figure facing +Z), also ``"-Y"``
    (y down, image-like). Without it the up axis is detected from the
    motion (feet to head), Z where the motion does not tell, with a warning.

Example::

    np.savez("walk.npz", positions=pos, joint_names=np.array(names), fps=30.0,
             units="m", up_axis="Z")

An ``.npz`` without ``positions`` but with ``poses`` (or ``root_orient`` and
``pose_body``) is an AMASS body-model motion, read by :mod:`.amass`.

A bare ``.npy`` holds only a ``(T, J, 3)`` array; its layout must be given
(``layout="coco17"``), with ``J`` equal to the layout's joint count, and its
frame rate, units and up axis default to 30 fps, metres-or-guessed, and
detected from the pose.

No ``bpy`` here.
"""

from __future__ import annotations

import zipfile

import numpy as np

from .amass import is_body_model, load_body_model, read_amass
from ..errors import message, setting
from .base import finish_clip
from .clip import KeypointReadError
from .layouts import get_layout, recognise_nameless

__all__ = ["read_npz", "read_npy", "check_declared_arrays", "MAX_ARRAY_BYTES", "MAX_POINTS"]

#: Largest array a keypoint file may declare: checked from its header before anything is allocated.
MAX_ARRAY_BYTES = 8 * 2 ** 30
#: Most points per frame (a dense marker set or mesh has thousands, not millions).
MAX_POINTS = 100_000


def _declared(handle):
    """``(shape, dtype)`` from a ``.npy`` header (``None`` when it is not one: the reader says why)."""
    try:
        version = np.lib.format.read_magic(handle)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _fortran, dtype = read(handle)
    except (ValueError, OSError, EOFError, SyntaxError, TypeError):
        return None
    return tuple(int(n) for n in shape), dtype


def check_declared_arrays(path):
    """Refuse a ``.npy``/``.npz`` whose header declares an array too large to hold, before it is read.

    Raises
    ------
    KeypointReadError
        More than :data:`MAX_ARRAY_BYTES` in one array, or more than
        :data:`MAX_POINTS` points per frame (the message names the array and its shape).
    """
    members = []
    try:
        if str(path).lower().endswith(".npz"):
            with zipfile.ZipFile(path) as archive:
                for name in archive.namelist():
                    if name.endswith(".npy"):
                        with archive.open(name) as handle:
                            members.append((name[:-4], _declared(handle)))
        else:
            with open(path, "rb") as handle:
                members.append(("the array", _declared(handle)))
    except (OSError, zipfile.BadZipFile, EOFError, ValueError):
        return  # the reader reports a bad file
    for name, declared in members:
        if declared is None:
            continue
        shape, dtype = declared
        size = int(np.prod(shape, dtype=object)) * int(dtype.itemsize)
        what = f"'{name}'" if name != "the array" else name
        if size > MAX_ARRAY_BYTES:
            raise KeypointReadError(path, f"{what} declares shape {shape} ({size / 2 ** 30:,.1f} GiB of {dtype}), more "
                                    f"than the {MAX_ARRAY_BYTES / 2 ** 30:g} GiB a keypoint array may hold: corrupt?")
        if name in ("positions", "the array") and len(shape) >= 2 and shape[-2 if len(shape) > 2 else 0] > MAX_POINTS:
            raise KeypointReadError(path, f"{what} declares shape {shape}: more than {MAX_POINTS:,} points per "
                                    "frame: not a keypoint file?")


def _scalar_str(path, data, key):
    if key not in data:
        return None
    v = data[key]
    if v.shape != () and v.size != 1:
        raise KeypointReadError(path, f"'{key}' must be a single string, got shape {v.shape}")
    return str(v.reshape(()).item())


def read_npz(path, *, layout=None, units=None, up_axis=None, fps=None, max_gap=5, ground=True):
    """Read a ``.npz`` keypoint file (format in the module docstring)."""
    check_declared_arrays(path)
    body = None
    try:
        with np.load(path, allow_pickle=False) as data:
            keys = set(data.files)
            missing = [k for k in ("positions", "joint_names", "fps") if k not in keys]
            if is_body_model(keys):   # AMASS: SMPL rotations, no positions
                body = load_body_model(path, data)
            elif missing:
                raise KeypointReadError(path, f"missing array{'s' if len(missing) > 1 else ''} "
                                        f"{', '.join(missing)} (has: {', '.join(sorted(keys)) or 'nothing'})")
            else:
                pos = data["positions"]
                names = data["joint_names"]
                file_fps = data["fps"]
                conf = data["confidence"] if "confidence" in keys else None
                file_units = _scalar_str(path, data, "units")
                file_up = _scalar_str(path, data, "up_axis")   # (None: detected from the motion)
                parents = data["parents"] if "parents" in keys else None
    except KeypointReadError:
        raise
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError) as ex:
        raise KeypointReadError(path, f"not a readable .npz archive ({type(ex).__name__}: {ex})") from None
    if body is not None:
        return read_amass(path, body, layout=layout, units=units, up_axis=up_axis, fps=fps, max_gap=max_gap,
                          ground=ground)
    if pos.dtype.kind not in "fiu":
        raise KeypointReadError(path, f"'positions' must be numbers, got dtype {pos.dtype}")
    if names.ndim != 1 or names.dtype.kind not in "US":
        raise KeypointReadError(path, f"'joint_names' must be a 1-D string array, got {names.dtype} {names.shape}")
    if file_fps.size != 1 or file_fps.dtype.kind not in "fiu":
        raise KeypointReadError(path, f"'fps' must be one number, got {file_fps.dtype} {file_fps.shape}")
    if pos.ndim != 3 or pos.shape[-1] != 3:
        raise KeypointReadError(path, f"'positions' must have shape (frames, joints, 3), got {pos.shape}")
    if pos.shape[1] != names.shape[0]:
        raise KeypointReadError(path, f"{names.shape[0]} joint names for {pos.shape[1]} joints in 'positions'")
    if conf is not None and conf.dtype.kind not in "fiu":
        raise KeypointReadError(path, f"'confidence' must be numbers, got dtype {conf.dtype}")
    if parents is not None and (parents.dtype.kind not in "iu" or parents.shape != names.shape):
        raise KeypointReadError(path, f"'parents' must be one integer per joint (-1 for a root), got "
                                f"{parents.dtype} {parents.shape}")
    return finish_clip(
        path, pos, [str(n) for n in names], fps=fps, file_fps=float(file_fps.reshape(())), confidence=conf,
        layout=layout, units=units, up_axis=up_axis, file_units=file_units, file_up_axis=file_up,
        max_gap=max_gap, ground=ground, parents=None if parents is None else parents.astype(np.int64),
    )


def read_npy(path, *, layout=None, units=None, up_axis=None, fps=None, max_gap=5, ground=True):
    """Read a bare ``(T, J, 3)`` ``.npy`` array.

    Without ``layout`` the array is recognised from its joint count and
    geometry (:func:`.layouts.recognise_nameless`: SMPL-22/24, H36M-17,
    COCO-17, MediaPipe-33, canonical 32).
    """
    check_declared_arrays(path)
    try:
        pos = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as ex:
        raise KeypointReadError(path, f"not a readable .npy array ({ex})") from None
    if not isinstance(pos, np.ndarray) or pos.dtype.kind not in "fiu":
        raise KeypointReadError(path, "a .npy keypoint file must hold one numeric array")
    if pos.ndim == 2 and pos.shape[-1] == 3:
        pos = pos[None]
    if pos.ndim != 3 or pos.shape[-1] != 3:
        raise KeypointReadError(path, f"array must have shape (frames, joints, 3), got {pos.shape}")
    warns = []
    if layout is None:
        lay, names, reason = recognise_nameless(pos)
        if lay is None:
            raise KeypointReadError(path, f"a .npy array has no joint names and {reason}: pass "
                                    f"{setting('layout', 'NAME')} (e.g. coco17, h36m17, smpl24, mediapipe_pose, "
                                    "canonical) or use the .npz format with joint_names")
        warns.append(message(f"no joint names: {reason} (override with {setting('layout')})"))
    else:
        try:
            lay = get_layout(layout)
        except (KeyError, ValueError) as ex:
            raise KeypointReadError(path, str(ex).strip("'\"")) from None
        names = list(lay.joint_names)
        if pos.shape[1] != len(names):
            raise KeypointReadError(path, f"{pos.shape[1]} joints per frame but layout {lay.name!r} has "
                                    f"{len(names)}")
    return finish_clip(path, pos, names, fps=fps, layout=lay, units=units, up_axis=up_axis,
                       max_gap=max_gap, ground=ground, warnings=warns)
