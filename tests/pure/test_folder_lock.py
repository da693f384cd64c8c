"""A batch refused by another's lock names that run, even when refused just as it took the lock."""

import fcntl
import json
import os
import threading

import pytest

from _pkg import pkg

pkg()
from neural_ik.cli.errors import CliError  # noqa: E402
from neural_ik.cli.locks import LOCK_NAME, FolderLock  # noqa: E402


def test_a_run_refused_while_the_holder_writes_its_record_names_the_holder(tmp_path):
    path = tmp_path / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)   # held, its record not written yet

    def write_record():
        os.write(fd, (json.dumps({"pid": os.getpid(), "host": "here", "command": "batch"}) + "\n").encode())

    timer = threading.Timer(0.2, write_record)
    timer.start()
    try:
        with pytest.raises(CliError) as err:
            FolderLock(str(tmp_path)).acquire()
    finally:
        timer.join()
        os.close(fd)
    assert "another neural-ik batch (process {} on here".format(os.getpid()) in str(err.value)
