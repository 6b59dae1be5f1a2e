"""Test configuration: keep every test offline and deterministic."""

from __future__ import annotations

import os

# Must happen before huggingface_hub is first imported anywhere (open_clip imports it).
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")
# galleria's model cache (exported ONNX files, remembered checkpoint paths): one per test session,
# never the user's, so that no test finds what another session left there.
if "GALLERIA_MODEL_CACHE_DIR" not in os.environ:
    import tempfile

    os.environ["GALLERIA_MODEL_CACHE_DIR"] = tempfile.mkdtemp(prefix="galleria-models-")

from hypothesis import HealthCheck, settings

settings.register_profile(
    "galleria",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("galleria")
