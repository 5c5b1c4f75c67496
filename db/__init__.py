"""The replay database (SQLite through sqlite-utils). Imports nothing of the project."""
from db.store import Store, StoreError, StoreWriteError, NoDatabase, BlobError, SCHEMA_VERSION, default_path

__all__ = ["Store", "StoreError", "StoreWriteError", "NoDatabase", "BlobError", "SCHEMA_VERSION", "default_path"]
