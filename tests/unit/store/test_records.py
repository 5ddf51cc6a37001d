"""store/records.py: folders made while another process deletes them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from boxmq.store import records
from boxmq.store.records import make_folders


@pytest.mark.parametrize("flush", [False, True])
def test_a_folder_deleted_by_another_process_as_it_is_made_is_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flush: bool
) -> None:
    """Another process makes the folder and deletes it between makedirs' mkdir and its look
    (a share group's last member leaving while a member joins): made again, where the join
    raised FileExistsError."""
    path = tmp_path / "topic-root" / "t" / ".subscriptions" / "share.g"
    real_mkdir = os.mkdir
    raced: list[str] = []

    def mkdir(name: str | os.PathLike[str], mode: int = 0o777) -> None:
        if os.fspath(name) == os.fspath(path) and not raced:
            raced.append(os.fspath(name))  # there at the mkdir, gone at the look
            raise FileExistsError(17, "File exists", os.fspath(name))
        real_mkdir(name, mode)

    monkeypatch.setattr(os, "mkdir", mkdir)
    make_folders(os.fspath(path), flush=flush, within=os.fspath(tmp_path))
    assert raced
    assert path.is_dir()


def test_a_file_where_the_folder_goes_is_still_an_error(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("")
    with pytest.raises(FileExistsError):
        make_folders(os.fspath(tmp_path / "a"), flush=False, within=os.fspath(tmp_path))


@pytest.mark.parametrize("flush", [False, True])
def test_a_folder_above_deleted_by_another_process_as_one_is_made_in_it_is_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flush: bool
) -> None:
    """A filter's folders, empty, deleted by the end of its last subscription in another
    process after a subscribe here found them there and before it made its folder in them
    (topics.remove_subscription): made again, all of them on disk with `flush`."""
    within = tmp_path / "root"
    filter = within / "topic-root" / "t"
    path = filter / ".subscriptions" / "share.g"
    path.parent.mkdir(parents=True)
    real_mkdir = os.mkdir
    flushed: list[str] = []
    raced: list[str] = []

    def mkdir(name: str | os.PathLike[str], mode: int = 0o777) -> None:
        if os.fspath(name) == os.fspath(path) and not raced:
            raced.append(os.fspath(name))
            os.rmdir(path.parent)  # the other process's end: the filter's folders go
            os.rmdir(filter)
        real_mkdir(name, mode)

    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.setattr(records, "flush_directories", flushed.extend)
    make_folders(os.fspath(path), flush=flush, within=os.fspath(within))
    assert raced
    assert path.is_dir()
    if flush:  # each folder made again is an entry of its parent, fsynced
        assert set(flushed) == {str(filter.parent), str(filter), str(path.parent)}


def test_a_relative_path_whose_top_folder_is_missing_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """os.makedirs makes `rel/a/b` in the current folder; the look for what is missing went
    up to "" there, whose mkdir failed, and the make was tried 1000 times, then refused
    (found by a second read)."""
    monkeypatch.chdir(tmp_path)
    make_folders("rel/a/b", flush=True, within="rel")
    assert (tmp_path / "rel" / "a" / "b").is_dir()
