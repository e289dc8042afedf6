"""Amazon S3 as Toren's run archive: ``TOREN_ARCHIVE=s3://bucket/prefix``."""

from toren_s3.archive import S3Archive

__all__ = ["S3Archive"]
