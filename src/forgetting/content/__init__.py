"""The additive content of a QSS instance: integer sufficient statistics and their means."""
