"""Saving and loading MUNKEY models without pickles: safetensors + a JSON manifest, one file.

The file is a standard safetensors file. Its tensors are the backbone's ``state_dict``
(``backbone.*``) and the live memory rows (``memory.keys``, ``memory.exemplars`` — only the
``size`` live rows, so a forgotten row's bytes are never written). Its ``__metadata__`` holds
two strings: ``manifest`` (JSON: parameters, classes, ids in slot order, tombstone hashes,
library versions) and ``sha256``, a digest over the manifest and every tensor's name, dtype,
shape and bytes. Loading parses only JSON and raw tensor bytes (no code runs from the file) and
refuses — with one :class:`~forgetting.persistence.ModelFileError` — any file whose header,
manifest, digest or library versions do not check out.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import safetensors
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from ..io.atomic import atomic_write
from ..persistence import ModelFileError
from ..schema.membership import key_fingerprint
from .backbone import TinyViT, ViTConfig
from .memory import KeyMemory

FORMAT = "forgetting-munkey"
FORMAT_VERSION = 1
_SKIP_PARAMS = ("encoder", "secret_key")


def library_versions() -> dict[str, str]:
    """Versions that bit-exact predictions depend on."""
    return {
        "torch": torch.__version__,
        "numpy": np.__version__,
        "safetensors": safetensors.__version__,
    }


def _digest(manifest: str, tensors: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256(manifest.encode())
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        h.update(f"|{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()


def _encoder_spec(encoder: Any) -> dict | None:
    if encoder is None:
        return None
    from ..encoders import HOGEncoder

    if type(encoder) is HOGEncoder:
        return {
            "type": "HOGEncoder",
            "image_shape": list(encoder.image_shape),
            "orientations": int(encoder.orientations),
            "pixels_per_cell": int(encoder.pixels_per_cell),
            "cells_per_block": int(encoder.cells_per_block),
            "pool": int(encoder.pool),
        }
    return {"type": "custom", "repr": repr(encoder)[:200]}


def _classes_json(classes: np.ndarray) -> dict:
    if classes.dtype.kind in "biu":
        return {"kind": "int", "values": [int(c) for c in classes]}
    if classes.dtype.kind == "f":
        return {"kind": "float", "values": [float(c) for c in classes]}
    return {"kind": "str", "values": [str(c) for c in classes]}


def save_munkey(model, path: str | Path) -> None:
    """Write ``model`` to ``path`` atomically (temp file, fsync, rename)."""
    memory: KeyMemory = model.memory_
    params = {k: v for k, v in model.get_params(deep=False).items() if k not in _SKIP_PARAMS}
    manifest = json.dumps(
        {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "class": type(model).__name__,
            "params": {k: (int(v) if isinstance(v, np.integer) else v) for k, v in params.items()},
            "encoder": _encoder_spec(model.encoder),
            "backbone": model.net_.config.to_dict(),
            "classes": _classes_json(model.classes_),
            "image_shape": [int(s) for s in model.image_shape_],
            "ids": list(memory.ids),
            "tombstones": sorted(model.tombstones_),
            "key_fingerprint": key_fingerprint(model._hash_key()),
            "libraries": library_versions(),
        },
        sort_keys=True,
    )
    tensors = {f"backbone.{k}": v.detach().clone() for k, v in model.net_.state_dict().items()}
    tensors["memory.keys"] = memory.keys.clone()
    tensors["memory.exemplars"] = memory.exemplars.clone()
    blob = st_save(tensors, metadata={"manifest": manifest, "sha256": _digest(manifest, tensors)})
    atomic_write(path, blob)


def _read(path: str | Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """Manifest and tensors of a checked file, or ModelFileError."""
    data = Path(path).read_bytes()
    if len(data) < 8:
        raise ModelFileError(f"{path}: too short to be a MUNKEY model file (truncated?)")
    (header_len,) = struct.unpack_from("<Q", data)
    if header_len > len(data) - 8:
        raise ModelFileError(f"{path}: header longer than the file (truncated?)")
    try:
        header = json.loads(data[8 : 8 + header_len])
        meta = header["__metadata__"]
        manifest_text, digest = meta["manifest"], meta["sha256"]
        manifest = json.loads(manifest_text)
        tensors = st_load(data)
    except Exception as err:  # noqa: BLE001 - every parse failure is one kind of bad file
        raise ModelFileError(f"{path}: not a readable MUNKEY model file ({err})") from err
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ModelFileError(f"{path}: not a MUNKEY model file")
    if manifest.get("version") != FORMAT_VERSION:
        raise ModelFileError(
            f"{path}: format version {manifest.get('version')}, this library reads "
            f"version {FORMAT_VERSION}"
        )
    if _digest(manifest_text, tensors) != digest:
        raise ModelFileError(f"{path}: checksum mismatch; the file is corrupted or was edited")
    return manifest, tensors


def load_munkey(cls, path, encoder, secret_key, allow_version_mismatch: bool):
    """Rebuild a fitted :class:`MUNKEYClassifier` from a file written by :func:`save_munkey`."""
    manifest, tensors = _read(path)
    if manifest["class"] != cls.__name__:
        raise ModelFileError(f"{path}: holds a {manifest['class']}, not a {cls.__name__}")
    if manifest["libraries"] != library_versions() and not allow_version_mismatch:
        raise ModelFileError(
            f"{path}: written with {manifest['libraries']}, running {library_versions()}; "
            "bit-identical predictions are only guaranteed with the same versions"
        )
    spec = manifest["encoder"]
    if spec is not None and encoder is None:
        if spec["type"] != "HOGEncoder":
            raise ModelFileError(
                f"{path}: fitted with a custom key encoder ({spec['repr']}); pass it as encoder="
            )
        from ..encoders import HOGEncoder

        encoder = HOGEncoder(
            image_shape=tuple(spec["image_shape"]),
            orientations=spec["orientations"],
            pixels_per_cell=spec["pixels_per_cell"],
            cells_per_block=spec["cells_per_block"],
            pool=spec["pool"],
        )
    model = cls(**manifest["params"], encoder=encoder, secret_key=secret_key)
    if key_fingerprint(model._hash_key()) != manifest["key_fingerprint"]:
        raise ModelFileError(f"{path}: secret_key does not match the one the model was saved with")
    net = TinyViT(ViTConfig(**manifest["backbone"]))
    state = {k[len("backbone.") :]: v for k, v in tensors.items() if k.startswith("backbone.")}
    try:
        net.load_state_dict(state, strict=True)
        memory = KeyMemory(tensors["memory.keys"], tensors["memory.exemplars"], manifest["ids"])
    except (KeyError, RuntimeError, ValueError) as err:
        raise ModelFileError(f"{path}: inconsistent model file ({err})") from err
    net.eval()
    classes = manifest["classes"]
    dtype = {"int": np.int64, "float": np.float64, "str": np.str_}[classes["kind"]]
    model.net_ = net
    model.memory_ = memory
    model.classes_ = np.asarray(classes["values"], dtype=dtype)
    model.image_shape_ = tuple(manifest["image_shape"])
    model.patch_ = int(net.config.patch)
    model.tombstones_ = set(manifest["tombstones"])
    model.n_features_in_ = int(np.prod(model.image_shape_))
    return model
