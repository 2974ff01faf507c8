"""The disk box: how keys and values become bytes, and where large values live.

``disk`` (Disk, JSONDisk: keys to database keys, values inline or in value files), ``safedisk``
and ``picklecheck`` (SafeDisk: unpickling restricted to allowed types), ``codecs`` (the
compressors), ``derived`` (Disk types derived with options), ``default`` (the process-wide
default Disk type), ``valuefiles`` (value-file names and every file system call on them, confined
to the cache directory), ``directories`` and ``ownership`` (the directories a cache makes, and who
may use what it creates). Nothing here knows of SQLite.
"""
