"""Reference data bundled with the package (see each folder's LICENSE)."""
