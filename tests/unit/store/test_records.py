"""store/records.py: folders made while another process deletes them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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
