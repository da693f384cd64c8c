"""Reading a ``torch.save`` weights file into numpy arrays without importing torch.

A solve on the CPU runs the network in numpy (:mod:`.numpy_net`), and
importing torch only to open its weights would cost more than the solve
(docs/tuning.md#numpy_max_frames). ``torch.save`` writes a zip archive: one
pickle (``<name>/data.pkl``) of plain Python containers whose tensors point
at raw little-endian storages (``<name>/data/<key>``). This reader accepts
what ``torch.load(..., weights_only=True)`` accepts for a weights file
(dicts, lists, tuples, numbers, strings and tensors) and refuses every other
global, so a crafted file cannot run code.

No ``bpy`` or ``torch`` here.
"""

from __future__ import annotations

import collections
import io
import pickle
import zipfile

import numpy as np

__all__ = ["read_torch_file"]

#: Storage classes of a tensor in the pickle, and the numpy dtype of their bytes.
_STORAGES = {
    "HalfStorage": np.float16, "FloatStorage": np.float32, "DoubleStorage": np.float64,
    "BFloat16Storage": np.uint16, "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16,
    "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_,
}


class _Storage(str):
    """A storage class named in the pickle (the name says the element type)."""


def _bfloat16_to_float32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) as float32: the same value (bfloat16 is float32's upper half)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _rebuild_tensor(storage, offset, size, stride, *_):
    """A tensor as a numpy array: ``size`` elements with element ``stride`` from ``offset`` of ``storage``."""
    arr, bfloat16 = storage
    item = arr.itemsize
    view = np.lib.stride_tricks.as_strided(arr[int(offset):], shape=tuple(size),
                                           strides=tuple(int(s) * item for s in stride))
    out = np.array(view)
    return _bfloat16_to_float32(out) if bfloat16 else out


def _rebuild_parameter(data, *_):
    return data


class _Unpickler(pickle.Unpickler):
    """Unpickles ``data.pkl`` with the archive's storages; only tensors and plain containers."""

    _ALLOWED = {
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
        ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    }

    def __init__(self, data: bytes, archive: zipfile.ZipFile, prefix: str, byteorder: str):
        super().__init__(io.BytesIO(data))
        self.archive, self.prefix, self.byteorder = archive, prefix, byteorder
        self.storages = {}

    def find_class(self, module, name):
        if module == "torch" and name in _STORAGES:
            return _Storage(name)
        found = self._ALLOWED.get((module, name))
        if found is None:
            raise pickle.UnpicklingError(f"the file holds {module}.{name}, which a weights file does not")
        return found

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage" and isinstance(pid[1], _Storage)):
            raise pickle.UnpicklingError(f"unknown storage reference {pid!r:.80}")
        kind, key, numel = str(pid[1]), str(pid[2]), int(pid[4])
        if key not in self.storages:
            dtype = np.dtype(_STORAGES[kind]).newbyteorder("<" if self.byteorder == "little" else ">")
            raw = self.archive.read(f"{self.prefix}/data/{key}")
            arr = np.frombuffer(raw, dtype=dtype, count=numel)
            self.storages[key] = (arr.astype(arr.dtype.newbyteorder("=")), kind == "BFloat16Storage")
        return self.storages[key]


def read_torch_file(path):
    """The object a ``torch.save`` zip archive holds, its tensors as numpy arrays (float32 for bfloat16).

    Raises
    ------
    ValueError
        The file is not a zip archive of ``torch.save`` (the legacy
        pre-1.6 format included), is truncated, or holds anything but
        tensors and plain containers.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
            if not names:
                raise ValueError("no data.pkl in the archive: not a torch.save file")
            prefix = names[0][: -len("/data.pkl")]
            try:
                byteorder = archive.read(f"{prefix}/byteorder").decode().strip()
            except KeyError:   # (files of older torch versions: little-endian)
                byteorder = "little"
            return _Unpickler(archive.read(names[0]), archive, prefix, byteorder).load()
    except zipfile.BadZipFile as ex:
        raise ValueError(f"not a zip archive ({ex})") from None
    except (pickle.UnpicklingError, EOFError, KeyError, zipfile.LargeZipFile, OSError, TypeError,
            AttributeError, IndexError) as ex:
        if isinstance(ex, FileNotFoundError):
            raise
        raise ValueError(f"{type(ex).__name__}: {ex}") from None
