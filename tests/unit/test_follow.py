"""Following a log while a job writes it (:mod:`hpcbench.jobs.follow`): whole lines, in order, once."""

from __future__ import annotations

import os

from hpcbench.jobs.follow import LogFollower


def test_lines_arrive_once_and_whole(tmp_path):
    log = tmp_path / "job.out"
    follow = LogFollower(log)
    assert follow.new_lines() == []  # not written yet: a pending job
    log.write_bytes(b"epoch 1 loss 2.1\nepoch 2 lo")
    assert follow.new_lines() == ["epoch 1 loss 2.1"]
    assert follow.new_lines() == []
    with log.open("ab") as fh:
        fh.write(b"ss 1.7\r\n\xff bad byte\n")
    assert follow.new_lines() == ["epoch 2 loss 1.7", "\ufffd bad byte"]


def test_a_truncated_or_replaced_log_is_read_from_its_start(tmp_path):
    log = tmp_path / "job.out"
    log.write_text("one\ntwo\n")
    follow = LogFollower(log)
    assert follow.new_lines() == ["one", "two"]
    log.write_text("x\n")  # truncated and rewritten (shorter)
    assert follow.new_lines() == ["x"]
    other = tmp_path / "new.out"
    other.write_text("fresh 1\nfresh 2\nfresh 3\n")  # longer, and another file
    os.replace(other, log)
    assert follow.new_lines() == ["fresh 1", "fresh 2", "fresh 3"]


def test_the_rest_includes_a_last_line_without_its_newline(tmp_path):
    log = tmp_path / "job.out"
    follow = LogFollower(log)
    log.write_text("line1\nfinal-no-newline")
    assert follow.new_lines() == ["line1"]
    assert follow.rest() == ["final-no-newline"]
    assert follow.rest() == []
