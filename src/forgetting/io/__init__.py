"""Reading and writing files: user table files (CSV/Parquet/NPZ) and the model file format.

Nothing in this package runs code from the bytes it reads: table files are parsed as data, and
model files hold arrays and a JSON manifest, never pickles.
"""
