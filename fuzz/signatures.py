"""The fixed signature the codec targets validate against: the test repository's add_sub."""

from __future__ import annotations

from ensemble_runtime.config import model_config as mcfg
from ensemble_runtime.validation import ModelSignature

ADD_SUB_CONFIG = """
name: "add_sub" platform: "onnxruntime_onnx" max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] } ]
"""
ADD_SUB = ModelSignature.from_config(mcfg.parse_config_text(ADD_SUB_CONFIG))
