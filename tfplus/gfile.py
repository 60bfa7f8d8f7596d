"""tf.gfile (TF1): file operations on local paths, with TF1's names and errors (tf.errors.NotFoundError for a
missing path).

    import tfplus as tf
    if not tf.gfile.Exists(logdir):
        tf.gfile.MakeDirs(logdir)
    with tf.gfile.GFile(path, "w") as f:
        f.write("hello")
"""
from __future__ import annotations

import glob as _glob
import os
import shutil

from tfplus import errors

__all__ = ["GFile", "Open", "FastGFile", "Exists", "MakeDirs", "MkDir", "Glob", "ListDirectory", "IsDirectory",
           "Remove", "Rename", "Copy", "DeleteRecursively", "Walk", "Stat"]


def _not_found(path, what: str):
    return errors.NotFoundError(None, None, f"{what}: {path}: no such file or directory")


class GFile:
    """An open file (text or binary by mode, like open()); also a context manager and an iterator of lines."""

    def __init__(self, name, mode: str = "r"):
        self.name, self.mode = os.fspath(name), mode
        try:
            self._f = open(self.name, mode, **({} if "b" in mode else {"encoding": "utf-8"}))
        except FileNotFoundError:
            raise _not_found(self.name, "GFile") from None

    def read(self, n: int = -1):
        return self._f.read(n)

    def readline(self):
        return self._f.readline()

    def readlines(self):
        return self._f.readlines()

    def write(self, data):
        if "b" in self.mode and isinstance(data, str):
            data = data.encode()
        return self._f.write(data)

    def seek(self, offset, whence=0):
        return self._f.seek(offset, whence)

    def tell(self):
        return self._f.tell()

    def size(self) -> int:
        return os.path.getsize(self.name)

    def flush(self):
        self._f.flush()

    def close(self):
        self._f.close()

    def __iter__(self):
        return iter(self._f)

    def __next__(self):
        return next(self._f)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


Open = FastGFile = GFile


def Exists(filename) -> bool:  # noqa: N802 (TF1's names)
    return os.path.exists(filename)


def IsDirectory(dirname) -> bool:  # noqa: N802
    return os.path.isdir(dirname)


def MakeDirs(dirname) -> None:  # noqa: N802
    """Creates the directory and its parents; an existing directory is fine."""
    os.makedirs(dirname, exist_ok=True)


def MkDir(dirname) -> None:  # noqa: N802
    """Creates one directory; its parent must exist. An existing directory is fine."""
    try:
        os.mkdir(dirname)
    except FileExistsError:
        if not os.path.isdir(dirname):
            raise errors.AlreadyExistsError(None, None, f"MkDir: {dirname} exists and is not a directory") \
                from None
    except FileNotFoundError:
        raise _not_found(os.path.dirname(os.fspath(dirname)), "MkDir") from None


def Glob(pattern) -> list[str]:  # noqa: N802
    return sorted(_glob.glob(os.fspath(pattern)))


def ListDirectory(dirname) -> list[str]:  # noqa: N802
    """The entries' names (not paths), without '.' and '..'."""
    if not os.path.isdir(dirname):
        raise _not_found(dirname, "ListDirectory")
    return sorted(os.listdir(dirname))


def Remove(filename) -> None:  # noqa: N802
    try:
        os.remove(filename)
    except FileNotFoundError:
        raise _not_found(filename, "Remove") from None


def Rename(oldname, newname, overwrite: bool = False) -> None:  # noqa: N802
    if not os.path.exists(oldname):
        raise _not_found(oldname, "Rename")
    if os.path.exists(newname) and not overwrite:
        raise errors.AlreadyExistsError(None, None, f"Rename: {newname} exists (pass overwrite=True)")
    os.replace(oldname, newname)


def Copy(oldpath, newpath, overwrite: bool = False) -> None:  # noqa: N802
    if not os.path.exists(oldpath):
        raise _not_found(oldpath, "Copy")
    if os.path.exists(newpath) and not overwrite:
        raise errors.AlreadyExistsError(None, None, f"Copy: {newpath} exists (pass overwrite=True)")
    shutil.copyfile(oldpath, newpath)


def DeleteRecursively(dirname) -> None:  # noqa: N802
    if not os.path.exists(dirname):
        raise _not_found(dirname, "DeleteRecursively")
    if os.path.isdir(dirname):
        shutil.rmtree(dirname)
    else:
        os.remove(dirname)


def Walk(top, in_order: bool = True):  # noqa: N802
    """(dirname, subdirectory names, file names) for every directory under `top`, parents first when
    in_order."""
    for dirpath, dirnames, filenames in os.walk(top, topdown=in_order):
        yield dirpath, sorted(dirnames), sorted(filenames)


def Stat(filename) -> os.stat_result:  # noqa: N802
    try:
        return os.stat(filename)
    except FileNotFoundError:
        raise _not_found(filename, "Stat") from None


from tfplus.unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr(__name__, "tf.gfile")
