"""Add-on preferences: compute device, PyTorch status and the PyTorch installer.

This module is registered even when PyTorch does not import, so the user can
always see what is missing and install it from the preferences.
"""

import os
import subprocess
import sys
import threading

import bpy
from bpy.props import EnumProperty, StringProperty

from . import device

#: PyTorch version installed by "Install PyTorch"; matches ``requirements.txt``.
TORCH_VERSION = "2.13.0"
#: Package index for the CPU-only build of PyTorch.
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"

_DEVICE_ITEMS = (
    ("AUTO", "Auto", "Use CUDA when available, otherwise the CPU"),
    ("CPU", "CPU", "Always run the network on the CPU"),
    ("CUDA", "CUDA", "Run the network on an NVIDIA GPU (falls back to the CPU when unavailable)"),
)


def site_packages_dir(create=False):
    """Return the folder "Install PyTorch" installs into.

    Parameters
    ----------
    create : bool
        Create the folder when missing.

    Returns
    -------
    str or None
        ``bpy.utils.extension_path_user(__package__, path="site-packages")``,
        or ``None`` when the package is not installed as an extension (for
        example when it runs through ``./neural-ik``).
    """
    try:
        path = bpy.utils.extension_path_user(__package__, path="site-packages", create=create)
    except Exception:
        return None
    return path or None


def get_preferences(context=None):
    """Return this add-on's preferences, or ``None`` when it is not enabled.

    Parameters
    ----------
    context : bpy.types.Context, optional
        Defaults to ``bpy.context``.

    Returns
    -------
    NeuralIKPreferences or None
    """
    context = context or bpy.context
    addon = context.preferences.addons.get(__package__)
    return addon.preferences if addon is not None else None


def device_choice(context=None):
    """Return the compute-device setting as ``"auto"``, ``"cpu"`` or ``"cuda"``.

    Parameters
    ----------
    context : bpy.types.Context, optional
        Defaults to ``bpy.context``.

    Returns
    -------
    str
        ``"auto"`` when the preferences are not available.
    """
    prefs = get_preferences(context)
    return prefs.device.lower() if prefs is not None else "auto"


# -----------------------------------------------------------------------------
# PyTorch installer (background pip process polled by a modal timer)

class _InstallJob:
    """State of the running ``pip install``; read by the preferences panel."""

    def __init__(self):
        self.process = None
        self.lines = []
        self.reader = None
        self.returncode = None

    @property
    def running(self):
        return self.process is not None and self.returncode is None

    @property
    def last_line(self):
        return self.lines[-1] if self.lines else ""

    def start(self, cmd):
        self.lines = []
        self.returncode = None
        self.process = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.process.stdout:
            line = line.rstrip()
            if line:
                self.lines.append(line)
        self.returncode = self.process.wait()

    def cancel(self):
        if self.running:
            self.process.kill()


_install_job = _InstallJob()
#: Last result of "Install PyTorch" shown in the preferences ("" while none).
_install_message = ""


def pip_install_command(target, variant):
    """Build the ``pip install`` command line for PyTorch.

    Parameters
    ----------
    target : str
        Folder passed to ``pip install --target``.
    variant : {"CPU", "CUDA"}
        ``"CPU"`` uses the CPU-only index; ``"CUDA"`` uses PyPI, whose Linux
        wheels include CUDA.

    Returns
    -------
    list of str
    """
    cmd = [
        sys.executable, "-m", "pip", "install",
        "--disable-pip-version-check", "--no-input", "--upgrade",
        "--only-binary=:all:",
        "--target", target,
        "torch=={}".format(TORCH_VERSION),
    ]
    if variant == "CPU":
        cmd += ["--index-url", TORCH_CPU_INDEX]
    return cmd


def _redraw_preferences():
    for window in getattr(bpy.context.window_manager, "windows", ()):
        for area in window.screen.areas:
            if area.type == 'PREFERENCES':
                area.tag_redraw()


class NEURAL_IK_OT_install_pytorch(bpy.types.Operator):
    """Download and install PyTorch for this add-on (needs internet access)"""

    bl_idname = "neural_ik.install_pytorch"
    bl_label = "Install PyTorch"
    bl_options = {'INTERNAL'}

    variant: EnumProperty(
        name="Build",
        items=(
            ("CPU", "CPU", "Smaller download, runs on any machine"),
            ("CUDA", "CUDA", "For NVIDIA GPUs (large download)"),
        ),
        default="CPU",
    )

    _timer = None

    @classmethod
    def poll(cls, context):
        return not _install_job.running

    def execute(self, context):
        global _install_message
        if not bpy.app.online_access:
            self.report({'ERROR'}, "Online access is disabled: enable it in Preferences > System > Network")
            return {'CANCELLED'}
        target = site_packages_dir(create=True)
        if not target:
            self.report({'ERROR'}, "No user folder for this extension; install it as an extension first")
            return {'CANCELLED'}
        try:
            _install_job.start(pip_install_command(target, self.variant))
        except OSError as ex:
            self.report({'ERROR'}, "Could not start pip: {}".format(ex))
            return {'CANCELLED'}
        _install_message = ""
        wm = context.window_manager
        self._timer = wm.event_timer_add(0.5, window=context.window)
        wm.modal_handler_add(self)
        return {'RUNNING_MODAL'}

    def modal(self, context, event):
        global _install_message
        if event.type != 'TIMER':
            return {'PASS_THROUGH'}
        _redraw_preferences()
        if _install_job.running:
            return {'PASS_THROUGH'}
        context.window_manager.event_timer_remove(self._timer)
        self._timer = None
        _install_job.reader.join(timeout=5)
        if _install_job.returncode != 0:
            tail = [line for line in _install_job.lines if "ERROR" in line] or _install_job.lines[-3:]
            _install_message = "Install failed: " + " | ".join(tail)
            self.report({'ERROR'}, _install_message)
            return {'CANCELLED'}
        add_site_packages_to_path()
        from . import register_dependent
        if register_dependent():
            _install_message = "PyTorch installed: " + device.status_line(device_choice(context))
            self.report({'INFO'}, _install_message)
        else:
            _install_message = "PyTorch installed; restart Blender to use it"
            self.report({'WARNING'}, _install_message)
        return {'FINISHED'}

    def cancel(self, context):
        if self._timer is not None:
            context.window_manager.event_timer_remove(self._timer)
            self._timer = None


class NeuralIKPreferences(bpy.types.AddonPreferences):
    """Preferences of the Neural IK add-on."""

    bl_idname = __package__

    device: EnumProperty(
        name="Compute Device",
        description="Where the network runs",
        items=_DEVICE_ITEMS,
        default="AUTO",
    )

    def draw(self, context):
        layout = self.layout
        layout.prop(self, "device")
        version = device.torch_version()
        box = layout.box()
        if version is not None:
            box.label(text=device.status_line(self.device.lower()), icon='CHECKMARK')
        else:
            box.label(text="PyTorch is not installed: solving, baking and the sidebar are unavailable", icon='ERROR')
            if not bpy.app.online_access:
                box.label(text="Online access is disabled (Preferences > System > Network)", icon='INFO')
            row = box.row(align=True)
            row.enabled = not _install_job.running and bpy.app.online_access
            row.operator(NEURAL_IK_OT_install_pytorch.bl_idname, text="Install PyTorch (CPU)").variant = 'CPU'
            row.operator(NEURAL_IK_OT_install_pytorch.bl_idname, text="Install PyTorch (CUDA)").variant = 'CUDA'
            target = site_packages_dir()
            if target:
                box.label(text="Installs into: " + target)
        if _install_job.running:
            box.label(text="Installing PyTorch: " + _install_job.last_line[:120], icon='SORTTIME')
        elif _install_message:
            box.label(text=_install_message[:200], icon='INFO')


classes = [
    NeuralIKPreferences,
    NEURAL_IK_OT_install_pytorch,
]

_added_path = None


def add_site_packages_to_path():
    """Put the "Install PyTorch" folder on ``sys.path`` when it exists.

    Returns
    -------
    str or None
        The folder added, or ``None``.
    """
    global _added_path
    path = site_packages_dir()
    if path and os.path.isdir(path) and path not in sys.path:
        sys.path.append(path)
        _added_path = path
        import importlib
        importlib.invalidate_caches()
    return _added_path


def register():
    add_site_packages_to_path()
    for cls in classes:
        bpy.utils.register_class(cls)


def unregister():
    global _added_path, _install_message
    _install_job.cancel()
    _install_message = ""
    for cls in reversed(classes):
        bpy.utils.unregister_class(cls)
    if _added_path is not None and _added_path in sys.path:
        sys.path.remove(_added_path)
    _added_path = None
