"""The demo walk carried onto a test rig and stood on its floor (shared by the pure tests)."""

import numpy as np

UP = np.array([0.0, 0.0, 1.0])


def walk_on(rig, seconds=3.0, fps=30.0):
    """The demo walk carried onto ``rig``, its ankles at their rest heights where its feet are planted.

    Returns ``(plan, mapping, truth)``: the rig's plan and mapping and the walk's RetargetResult.
    """
    from neural_ik.cli.demo_motion import walk_keypoints, walk_rotations
    from neural_ik.model.skeleton import CANONICAL, KEYPOINTS
    from neural_ik.pipeline.targets import foot_points, planted_height
    from neural_ik.retarget.mapping import auto_map
    from neural_ik.retarget.solve import plan_retarget, pose_rig, retarget, target_keypoints

    mapping = auto_map(rig)
    plan = plan_retarget(rig, mapping)
    truth = retarget(plan, walk_rotations(seconds, fps), walk_keypoints(seconds, fps)[:, 0], CANONICAL)
    kp0 = target_keypoints(plan, truth.quaternions, truth.locations) @ plan.K.T
    fp = foot_points(plan, UP)
    shift = np.mean([fp[s][0][3] - planted_height(kp0, np.isfinite(kp0).all(-1), s, UP, fps,
                                                  KEYPOINTS.index(f"foot_{s}")) for s in "lr"])
    truth.locations[:, plan.root] += np.linalg.inv(rig.rest_rotation()[plan.root]) @ (UP * shift)
    _, truth.heads = pose_rig(rig, truth.quaternions, truth.locations)
    return plan, mapping, truth
