"""Pipelines that forget exactly: :func:`make_pipeline`, :class:`ForgettingPipeline` and the
:class:`PipelineReceipt` their ``forget`` and ``insert`` return (see :mod:`.core`, and
docs/pipelines.md)."""

from .core import ForgettingPipeline, PipelineReceipt
from .make import make_pipeline

__all__ = ["ForgettingPipeline", "PipelineReceipt", "make_pipeline"]
