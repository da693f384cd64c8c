"""A contact sheet of a bake, rendered headless with Workbench.

For each chosen frame, the input keypoints (spheres joined by thin
cylinders, orange) and the baked rig (one cylinder per bone from the
evaluated pose plus a sphere at each joint, blue) stand side by side, each
centred on its own pelvis, over a floor, in a separate scene that is deleted
afterwards. Every frame is rendered at ``size`` (320x240 by default) with
Workbench (armatures and empties are overlays and never render, hence the
mesh geometry) and the tiles are composed into one PNG with numpy; the PNG
is written with ``zlib`` to a temporary name and renamed.
"""

from __future__ import annotations

import math
import os
import struct
import tempfile
import zlib

import numpy as np

from ..pipeline.preview import pick_frames
from ..outputs import atomic_output

__all__ = ["render_contact_sheet", "render_preview", "object_poses", "at_frames", "write_png", "read_png",
           "read_png_size", "index_sheet", "pick_frames", "KEYPOINT_LINKS", "SHEET_FRAMES", "SHEET_COLUMNS",
           "TILE_SIZE"]

#: Frames of a contact sheet (``bake --preview``, the sidebar's Render Contact Sheet).
SHEET_FRAMES = 6
#: Tiles per row of a contact sheet.
SHEET_COLUMNS = 3
#: Pixels of one tile (width, height).
TILE_SIZE = (320, 240)

INPUT_COLOR = (0.95, 0.45, 0.1, 1.0)
RIG_COLOR = (0.15, 0.4, 0.9, 1.0)
FLOOR_COLOR = (0.85, 0.85, 0.82, 1.0)
TEXT_COLOR = (0.1, 0.1, 0.1, 1.0)


def _links():
    from ..model.skeleton import END_PARENTS, JOINTS, PARENTS

    links = [(PARENTS[j], j) for j in range(1, len(JOINTS))]
    links += [(END_PARENTS[e], len(JOINTS) + e) for e in range(len(END_PARENTS))]
    return links


#: Keypoint pairs drawn as sticks (joint -> child joint, joint -> end point).
KEYPOINT_LINKS = None


# ---------------------------------------------------------------------------
# PNG


def write_png(path, rgb):
    """Write an 8-bit RGB image as PNG (atomically).

    Parameters
    ----------
    path : str
    rgb : ndarray, shape (H, W, 3), uint8
        Top row first.
    """
    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    h, w = rgb.shape[:2]
    raw = np.concatenate([np.zeros((h, 1), np.uint8), rgb.reshape(h, w * 3)], axis=1).tobytes()

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    data = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))
    with atomic_output(path) as tmp:
        with open(tmp, "wb") as handle:
            handle.write(data)


def read_png(path):
    """An image :func:`write_png` wrote, as (H, W, 3) uint8; ``ValueError`` for any other PNG.

    (Only what this module writes is read back: 8-bit RGB, one IDAT, no
    row filters; a sheet a user replaced is refused, not misread.)
    """
    with open(path, "rb") as handle:
        data = handle.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        raise ValueError("{}: not a PNG".format(path))
    w, h, depth, color = struct.unpack(">IIBB", data[16:26])
    if depth != 8 or color != 2:
        raise ValueError("{}: not an 8-bit RGB PNG".format(path))
    pos, idat = 8, b""
    while pos + 8 <= len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + n]
        pos += 12 + n
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(h, 3 * w + 1)
    if raw[:, 0].any():
        raise ValueError("{}: row filters in use: not a sheet Neural IK wrote".format(path))
    return raw[:, 1:].reshape(h, w, 3).copy()


def index_sheet(path, sheets, tile=2, size=(320, 240), columns=4):
    """One tile (``tile``, row-major) of each contact sheet in ``sheets`` on one PNG; returns the sheets used.

    A sheet that cannot be read (gone, or not one this module wrote) is left out.
    """
    width, height = int(size[0]), int(size[1])
    tiles, used = [], []
    for sheet in sheets:
        try:
            img = read_png(sheet)
        except (OSError, ValueError, zlib.error):
            continue
        per_row = img.shape[1] // width
        if per_row < 1 or img.shape[0] < height:
            continue
        k = min(tile, per_row * (img.shape[0] // height) - 1)
        r, c = divmod(k, per_row)
        tiles.append(img[r * height:(r + 1) * height, c * width:(c + 1) * width])
        used.append(sheet)
    if not tiles:
        return []
    columns = max(1, min(int(columns), len(tiles)))
    rows = -(-len(tiles) // columns)
    out = np.full((rows * height, columns * width, 3), 255, dtype=np.uint8)
    for i, t in enumerate(tiles):
        r, c = divmod(i, columns)
        out[r * height:(r + 1) * height, c * width:(c + 1) * width] = t
    write_png(path, out)
    return used


def read_png_size(path):
    """``(width, height)`` from a PNG's IHDR; ``ValueError`` when not a PNG."""
    with open(path, "rb") as handle:
        head = handle.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        raise ValueError("{}: not a PNG file".format(path))
    return struct.unpack(">II", head[16:24])


# ---------------------------------------------------------------------------
# geometry (numpy)


def _sphere(segments=10, rings=6):
    verts = [(0.0, 0.0, 1.0)]
    for i in range(1, rings):
        theta = math.pi * i / rings
        for j in range(segments):
            phi = 2 * math.pi * j / segments
            verts.append((math.sin(theta) * math.cos(phi), math.sin(theta) * math.sin(phi), math.cos(theta)))
    verts.append((0.0, 0.0, -1.0))
    faces = []
    for j in range(segments):
        faces.append((0, 1 + j, 1 + (j + 1) % segments))
    for i in range(rings - 2):
        a, b = 1 + i * segments, 1 + (i + 1) * segments
        for j in range(segments):
            k = (j + 1) % segments
            faces.append((a + j, b + j, b + k, a + k))
    last = len(verts) - 1
    base = 1 + (rings - 2) * segments
    for j in range(segments):
        faces.append((base + j, last, base + (j + 1) % segments))
    return np.array(verts), faces


_SPHERE = _sphere()


class _MeshBuilder:
    """Accumulates spheres and cylinders into one vertex/face list."""

    def __init__(self):
        self.verts = []
        self.faces = []
        self.n = 0

    def sphere(self, center, radius):
        v, f = _SPHERE
        self.verts.append(v * radius + center)
        self.faces.extend(tuple(i + self.n for i in face) for face in f)
        self.n += len(v)

    def cylinder(self, a, b, radius, sides=8):
        a, b = np.asarray(a, float), np.asarray(b, float)
        axis = b - a
        length = np.linalg.norm(axis)
        if not length > 1e-6:
            return
        axis = axis / length
        helper = np.array([1.0, 0.0, 0.0]) if abs(axis[0]) < 0.9 else np.array([0.0, 1.0, 0.0])
        u = np.cross(axis, helper)
        u /= np.linalg.norm(u)
        w = np.cross(axis, u)
        ang = np.linspace(0, 2 * math.pi, sides, endpoint=False)
        ring = (np.cos(ang)[:, None] * u + np.sin(ang)[:, None] * w) * radius
        self.verts.append(np.concatenate([a + ring, b + ring]))
        n = self.n
        for i in range(sides):
            k = (i + 1) % sides
            self.faces.append((n + i, n + k, n + sides + k, n + sides + i))
        self.faces.append(tuple(n + i for i in reversed(range(sides))))
        self.faces.append(tuple(n + sides + i for i in range(sides)))
        self.n += 2 * sides

    def object(self, name, color, collection):
        import bpy

        mesh = bpy.data.meshes.new(name)
        verts = np.concatenate(self.verts) if self.verts else np.zeros((0, 3))
        mesh.from_pydata(verts.tolist(), [], self.faces)
        mesh.update()
        obj = bpy.data.objects.new(name, mesh)
        obj.color = color
        collection.objects.link(obj)
        return obj


def _keypoint_figure(points, offset):
    global KEYPOINT_LINKS
    if KEYPOINT_LINKS is None:
        KEYPOINT_LINKS = _links()
    mb = _MeshBuilder()
    for p in points:
        if np.isfinite(p).all():
            mb.sphere(p + offset, 0.032)
    for a, b in KEYPOINT_LINKS:
        if np.isfinite(points[a]).all() and np.isfinite(points[b]).all():
            mb.cylinder(points[a] + offset, points[b] + offset, 0.015)
    return mb


def _pose_segments(obj):
    """World (heads, tails) of the evaluated pose bones, shape (B, 3) each."""
    bones = obj.pose.bones
    n = len(bones)
    head = np.empty(n * 3, dtype=np.float32)
    tail = np.empty(n * 3, dtype=np.float32)
    bones.foreach_get("head", head)
    bones.foreach_get("tail", tail)
    m = np.array(obj.matrix_world, dtype=np.float64)
    h = head.reshape(n, 3) @ m[:3, :3].T + m[:3, 3]
    t = tail.reshape(n, 3) @ m[:3, :3].T + m[:3, 3]
    return h, t


def _rig_figure(heads, tails, offset, scale):
    mb = _MeshBuilder()
    for h, t in zip(heads, tails):
        length = np.linalg.norm(t - h)
        if length < 1e-4:
            continue
        radius = float(np.clip(0.12 * length, 0.004 * scale, 0.022 * scale))
        mb.cylinder(h + offset, t + offset, radius)
        if length > 0.04 * scale:
            mb.sphere(h + offset, radius * 1.35)
    return mb


def _text(name, body, location, size, collection, centred=False):
    import bpy

    curve = bpy.data.curves.new(name, type="FONT")
    curve.body = body
    curve.size = size
    if centred:
        curve.align_x = "CENTER"
    obj = bpy.data.objects.new(name, curve)
    obj.location = location
    obj.rotation_euler = (math.radians(90), 0.0, 0.0)
    obj.color = TEXT_COLOR
    collection.objects.link(obj)
    return obj


def at_frames(scene_frames, read, scene=None):
    """``read()`` at each scene frame, in a list; the scene's frame (and subframe) is set back afterwards."""
    import bpy

    src = scene or bpy.context.scene
    saved = src.frame_current, src.frame_subframe
    try:
        out = []
        for frame in scene_frames:
            src.frame_set(int(frame))
            out.append(read())
        return out
    finally:
        src.frame_set(saved[0], subframe=saved[1])


def object_poses(obj, scene_frames, source_scene=None):
    """World (heads, tails) of the evaluated pose bones of ``obj`` at each scene frame (its action playing)."""
    return at_frames(scene_frames, lambda: _pose_segments(obj), source_scene)


def _remove_objects(objects):
    """Remove the sheet's mesh and text objects and their data."""
    import bpy

    for obj in objects:
        data = obj.data
        bpy.data.objects.remove(obj)
        (bpy.data.meshes if isinstance(data, bpy.types.Mesh) else bpy.data.curves).remove(data)


class _Added:
    """The data-blocks a render adds on its own (the "Render Result" image, the text's font): removed after."""

    KINDS = ("images", "fonts")

    def __init__(self):
        import bpy

        self.before = {kind: set(getattr(bpy.data, kind)) for kind in self.KINDS}

    def remove(self):
        import bpy

        for kind in self.KINDS:
            blocks = getattr(bpy.data, kind)
            for block in [b for b in blocks if b not in self.before[kind]]:
                blocks.remove(block)


def _sheet_scene(width, height, tall):
    """The temporary scene: Workbench, object colours, a world and an orthographic camera; ``(scene, made)``."""
    import bpy

    scene = bpy.data.scenes.new("neural_ik_contact_sheet")
    made = []
    scene.render.engine = "BLENDER_WORKBENCH"
    scene.render.resolution_x, scene.render.resolution_y = width, height
    scene.render.resolution_percentage = 100
    scene.render.image_settings.file_format = "PNG"
    scene.render.image_settings.color_mode = "RGB"
    scene.render.film_transparent = False
    scene.display.shading.light = "STUDIO"
    scene.display.shading.color_type = "OBJECT"
    scene.display.render_aa = "8"
    world = bpy.data.worlds.new("neural_ik_contact_sheet")
    world.color = (0.93, 0.93, 0.93)
    scene.world = world
    made.append(world)
    cam_data = bpy.data.cameras.new("neural_ik_contact_sheet")
    cam_data.type = "ORTHO"
    # the larger image side spans ortho_scale: show about 1.5 tall vertically and 2 tall across
    cam_data.ortho_scale = max(2.0 * tall, 1.5 * tall * max(width, height) / min(width, height)) \
        if width >= height else 2.0 * tall * height / width
    cam = bpy.data.objects.new("neural_ik_contact_sheet_camera", cam_data)
    scene.collection.objects.link(cam)
    made.extend([cam, cam_data])
    dist = 6.0 * tall
    elev = math.radians(8.0)
    target = np.array([0.0, 0.0, 0.5 * tall])
    cam.location = tuple(target + dist * np.array([0.0, -math.cos(elev), math.sin(elev)]))
    cam.rotation_euler = (math.radians(90) - elev, 0.0, 0.0)
    scene.camera = cam
    return scene, made


def _remove_made(scene, made):
    import bpy

    bpy.data.scenes.remove(scene)
    for block in made:
        try:
            if isinstance(block, bpy.types.Object):
                bpy.data.objects.remove(block)
            elif isinstance(block, bpy.types.Camera):
                bpy.data.cameras.remove(block)
            elif isinstance(block, bpy.types.World):
                bpy.data.worlds.remove(block)
        except ReferenceError:
            pass


def _render_tile(scene, tile_path, width, height):
    """Render the scene's camera to ``tile_path`` and read it back: (H, W, 3) uint8, top row first."""
    import bpy

    from .calls import quiet

    scene.render.filepath = tile_path
    quiet(bpy.ops.render.render, write_still=True, scene=scene.name, _stderr=True)
    image = bpy.data.images.load(tile_path)
    try:
        px = np.empty(width * height * 4, dtype=np.float32)
        image.pixels.foreach_get(px)
    finally:
        bpy.data.images.remove(image)
    tile = np.flipud(px.reshape(height, width, 4)[..., :3])
    return np.clip(np.round(tile * 255.0), 0, 255).astype(np.uint8)


def _figure_height(keypoints, poses):
    """The taller of the rig (first pose) and the input, metres (at least 0.1): the sheet's scale."""
    heads, tails = (np.asarray(a, dtype=np.float64) for a in poses[0])
    tall = float(max(np.ptp(np.concatenate([heads, tails])[:, 2]), 0.1))
    if keypoints is not None and np.isfinite(keypoints).any():
        tall = max(tall, float(max(np.nanmax(keypoints[..., 2]) - min(np.nanmin(keypoints[..., 2]), 0.0), 0.1)))
    return tall


def _tile_figures(points, heads, tails, sep, tall, caption, coll):
    """The objects of one tile: the input (when given) left, the rig right (centred without an input)."""
    root_rig = heads.mean(axis=0)   # (a root bone may stay at the origin while the body walks)
    rig_x = sep if points is not None else 0.0
    off_rig = np.array([rig_x - root_rig[0], -root_rig[1], 0.0])
    figures = [
        _rig_figure(heads, tails, off_rig, tall / 1.8).object("neural_ik_rig", RIG_COLOR, coll),
        # (above the captions, centred: a batch's tile names its clip)
        _text("neural_ik_label", caption, (0.0, 0.0, 1.18 * tall), 0.055 * tall, coll, centred=True),
    ]
    if points is not None and np.isfinite(points).any():
        pelvis_in = points[0] if np.isfinite(points[0]).all() else np.nanmean(points, axis=0)
        off_in = np.array([-sep - pelvis_in[0], -pelvis_in[1], 0.0])
        figures.append(_keypoint_figure(points, off_in).object("neural_ik_input", INPUT_COLOR, coll))
    return figures


def render_contact_sheet(path, keypoints, poses, labels, *, size=TILE_SIZE, columns=SHEET_COLUMNS, label="",
                         progress=None):
    """Render the input keypoints and the baked rig side by side at several frames.

    Nothing of the open file changes: the sheet's scene, objects, camera and
    world, and what a render adds (the "Render Result" image, the captions'
    font), are removed again.

    Parameters
    ----------
    path : str
        Output PNG.
    keypoints : ndarray, shape (N, 32, 3), or None
        Input keypoints (world, metres) at the chosen frames; ``None``: the rig alone.
    poses : sequence of (heads, tails)
        The baked rig's bones at the same frames, world (B, 3) arrays each
        (:func:`object_poses` of an armature, or a bake's
        :class:`..pipeline.preview.PreviewPose`).
    labels : sequence of int
        Frame number shown under each tile.
    size : (int, int)
        Tile size in pixels.
    columns : int
        Tiles per row of the sheet.
    label : str
        Caption prefix of each tile.
    progress : callable, optional
        ``progress(done, total)`` after each tile.

    Returns
    -------
    tuple of int
        ``(width, height)`` of the sheet.
    """
    width, height = int(size[0]), int(size[1])
    kp = None if keypoints is None else np.asarray(keypoints, dtype=np.float64)
    n = len(labels)
    columns = max(1, min(int(columns), n))
    rows = int(math.ceil(n / columns))
    sheet = np.full((rows * height, columns * width, 3), 255, dtype=np.uint8)
    tall = _figure_height(kp, poses)
    sep = 0.5 * tall
    added = _Added()
    scene, made = _sheet_scene(width, height, tall)
    tmpdir = tempfile.mkdtemp(prefix="neural_ik_sheet_")
    shown = []    # (objects on the sheet's scene now: removed however the render ends)
    try:
        coll = scene.collection
        floor = _MeshBuilder()
        floor.verts.append(np.array([[-1.6, -0.8, 0], [1.6, -0.8, 0], [1.6, 0.8, 0], [-1.6, 0.8, 0]]) * tall)
        floor.faces.append((0, 1, 2, 3))
        floor.n = 4
        shown.append(floor.object("neural_ik_floor", FLOOR_COLOR, coll))
        captions = (("input", -sep), ("baked", sep)) if kp is not None else (("baked", 0.0),)
        for cap, x in captions:
            shown.append(_text("neural_ik_caption_" + cap, cap, (x - 0.1 * tall, 0.0, 1.1 * tall), 0.08 * tall, coll))
        for i, frame in enumerate(labels):
            heads, tails = (np.asarray(a, dtype=np.float64) for a in poses[i])
            figures = _tile_figures(None if kp is None else kp[i], heads, tails, sep, tall,
                                    "{}frame {}".format(label, int(frame)), coll)
            shown.extend(figures)
            r, c = divmod(i, columns)
            sheet[r * height:(r + 1) * height, c * width:(c + 1) * width] = _render_tile(
                scene, os.path.join(tmpdir, "tile_{:03d}.png".format(i)), width, height)
            _remove_objects(figures)
            del shown[-len(figures):]
            if progress is not None:
                progress(i + 1, n)
    finally:
        _remove_objects(shown)
        _remove_made(scene, made)
        added.remove()
        for name in os.listdir(tmpdir):
            os.unlink(os.path.join(tmpdir, name))
        os.rmdir(tmpdir)
    write_png(path, sheet)
    return sheet.shape[1], sheet.shape[0]


def render_preview(path, preview, frame_start, *, size=TILE_SIZE, columns=SHEET_COLUMNS, label=""):
    """The contact sheet of a bake's :class:`..pipeline.preview.PreviewPose`; tiles numbered as scene frames
    from ``frame_start``. Returns ``(width, height)``."""
    poses = list(zip(preview.heads, preview.tails))
    labels = [int(frame_start) + int(f) for f in preview.frames]
    return render_contact_sheet(path, preview.keypoints, poses, labels, size=size, columns=columns, label=label)
