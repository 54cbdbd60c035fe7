"""Write a report file atomically, so a reader never sees half of it."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def write_text_atomically(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` (UTF-8) to `path`, creating its folder if needed.

    The text goes to a temporary file beside `path` that then replaces it, so a
    reader never sees half a report, even when the run is killed while writing.

    Args:
        path: str or path-like, where the file goes.
        text: str, the whole content.

    Raises:
        OSError: when the folder cannot be created or the file cannot be written.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        _write_new_file(temporary, text)
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _write_new_file(path: Path, text: str) -> None:
    # os.open with mode 0o666 lets the user's umask set the permissions, as a plain
    # open() would; tempfile.mkstemp would leave the report readable by its owner only.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    with open(descriptor, "w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
