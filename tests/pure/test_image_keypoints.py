"""Image keypoints: MediaPipe image landmarks lifted with the image size; OpenPose folders, COCO and
AlphaPose results refused as 2D with what to do."""

import json

import numpy as np
import pytest

from image_fixtures import mediapipe_image, mediapipe_points, write_mediapipe_json, write_openpose_folder
from source_fixtures import walk_keypoints

from neural_ik.model.skeleton import KEYPOINTS
from neural_ik.readers import KeypointReadError, body_height, read_keypoints, to_canonical, upright_share
from neural_ik.readers.image2d import ASSUMED_HEIGHT

WALK = walk_keypoints(40)


def test_image_landmarks_lifted_with_the_image_size(tmp_path):
    path = write_mediapipe_json(tmp_path / "image.json", mediapipe_image(WALK))
    clip = read_keypoints(path, image_size=(1920, 1080))
    assert clip.units == "m" and clip.up_axis == "-Y" and clip.layout == "mediapipe_pose"
    assert any("--image-size 1920 1080" in w and "1.7 m tall" in w and "not recovered" in w for w in clip.warnings)
    kp, mask = to_canonical(clip)
    assert upright_share(kp, mask) == 1.0
    assert body_height(kp, mask) == pytest.approx(ASSUMED_HEIGHT, rel=1e-6)
    # the body's shape, scaled: across and up exactly, depth relative to the hips as MediaPipe gives it
    ref, ref_mask = to_canonical(read_keypoints(write_mediapipe_json(tmp_path / "w.json", mediapipe_points(WALK)),
                                                up_axis="Z", units="m"))
    scale = ASSUMED_HEIGHT / body_height(ref, ref_mask)
    pelvis = KEYPOINTS.index("pelvis")
    got = kp[mask[:, pelvis]] - kp[mask[:, pelvis], pelvis][:, None]
    want = (ref - ref[:, pelvis][:, None]) * scale
    both = mask & ref_mask
    np.testing.assert_allclose(got[both], want[both], atol=1e-6)


def test_image_landmarks_of_another_aspect_keep_the_body(tmp_path):
    # the same body in a portrait 1080 x 1920 video: x and y divided by other sizes
    pts = mediapipe_image(WALK, width=1080, height=1920, origin=(540.0, 1400.0))
    clip = read_keypoints(write_mediapipe_json(tmp_path / "portrait.json", pts), image_size=(1080, 1920))
    kp, mask = to_canonical(clip)
    shin = np.linalg.norm(kp[:, KEYPOINTS.index("calf_l")] - kp[:, KEYPOINTS.index("foot_l")], axis=-1)
    thigh = np.linalg.norm(kp[:, KEYPOINTS.index("thigh_l")] - kp[:, KEYPOINTS.index("calf_l")], axis=-1)
    np.testing.assert_allclose(shin / thigh, 0.40 / 0.42, rtol=1e-6)     # the canonical proportions


@pytest.mark.parametrize("key", ["landmarks", "pose_landmarks"])
def test_image_landmarks_without_the_size_are_refused_with_the_flag(tmp_path, key):
    path = write_mediapipe_json(tmp_path / "image.json", mediapipe_image(WALK), key=key)
    with pytest.raises(KeypointReadError, match=r"image\.json: 2D image keypoints: MediaPipe image landmarks.*"
                                                r"give --image-size W H.*pose_world_landmarks"):
        read_keypoints(path)


def test_image_size_for_world_landmarks_is_refused(tmp_path):
    path = write_mediapipe_json(tmp_path / "world.json", mediapipe_points(WALK) - [0.0, 0.0, 0.9])
    with pytest.raises(KeypointReadError, match=r"world\.json: --image-size is for image landmarks.*leave"):
        read_keypoints(path, image_size=(1920, 1080))


def test_image_size_is_ignored_by_other_files(tmp_path):
    path = tmp_path / "walk.npz"
    np.savez(path, positions=WALK, joint_names=np.array(KEYPOINTS), fps=30.0)
    assert read_keypoints(path, image_size=(640, 480)).num_frames == len(WALK)


def test_openpose_folder_is_read_and_refused_as_2d(tmp_path):
    folder = write_openpose_folder(tmp_path / "openpose_out", frames=4)
    with pytest.raises(KeypointReadError, match=r"openpose_out: 2D image keypoints \(an OpenPose output folder: 4 "
                                                r"frames.*BODY_25, 25 keypoints\): .*Lift them.*Pose2Sim"):
        read_keypoints(folder)


def test_folders_that_are_not_openpose_output(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(KeypointReadError, match=r"empty: a folder, not a keypoint file.*batch"):
        read_keypoints(tmp_path / "empty")
    bad = tmp_path / "broken"
    bad.mkdir()
    (bad / "a_000000000000_keypoints.json").write_text("{\"people\": [")
    with pytest.raises(KeypointReadError, match=r"a_000000000000_keypoints\.json: not a readable OpenPose frame"):
        read_keypoints(bad)


@pytest.mark.parametrize("data, what", [
    ([{"image_id": "0.jpg", "category_id": 1, "keypoints": [1.0, 2.0, 0.9] * 26, "score": 2.1, "box": [0, 0, 9, 9],
       "idx": [0]}, {"image_id": "1.jpg", "category_id": 1, "keypoints": [1.0, 2.0, 0.9] * 26, "score": 2.0}],
     r"COCO results, as AlphaPose writes them.*2 detections in 2 images, Halpe-26"),
    ({"0.jpg": [{"keypoints": [1.0, 2.0, 0.9] * 17, "scores": 1.0, "idx": 1}], "1.jpg": []},
     r"AlphaPose tracked results: 2 images, COCO-17"),
])
def test_alphapose_results_are_refused_as_2d(tmp_path, data, what):
    path = tmp_path / "alphapose-results.json"
    path.write_text(json.dumps(data))
    with pytest.raises(KeypointReadError, match=rf"alphapose-results\.json: 2D image keypoints \({what}.*Lift"):
        read_keypoints(path)


def test_a_file_that_says_metres_is_not_taken_for_image_landmarks(tmp_path):
    path = write_mediapipe_json(tmp_path / "small.json", mediapipe_image(WALK))
    data = json.loads(path.read_text())
    data["units"] = "m"
    path.write_text(json.dumps(data))
    clip = read_keypoints(path)
    assert clip.units == "m" and any("m tall" in w and "--units" in w for w in clip.warnings)
