"""`ringleader cluster`: run, exec and sync on a plain cluster of machines reached over ssh."""
