"""Table data on storage through ``pyarrow.fs``: local directories, S3, HDFS alike."""

from firn.io.storage import Storage

__all__ = ["Storage"]
