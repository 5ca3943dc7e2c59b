"""CHECK-ONLY sentinels: SGLang's quantization utils build GPTQ type lists from these at import
time (layers/quantization/utils.py: `scalar_types.uint4b8`, ...); sentinel attributes suffice."""

from sgl_kernel._sentinel import install

install(__name__, ("ScalarType", "scalar_types"))
