"""Survey of OCR and recurrent / streaming audio models as real PyTorch projects write them:
re-implementations of the published architectures (random init, small sizes, no download) and
transformers / timm / torchvision modules built from configs, exported with both torch exporters.

Needs torch, torchvision, timm and transformers (not project dependencies: a tool for developers,
never run by the tests). Export in a scratch venv, survey with the project's venv (the survey part
is tools/survey_torch_exports.py's):

    /tmp/venv/bin/python tools/survey_ocr_audio_exports.py export OUT_DIR [NAME ...]
    python tools/survey_ocr_audio_exports.py survey OUT_DIR [NAME ...] [--quant] [--clean]

Models (docs/surveys/ocr-audio.md): OCR: crnn_vgg, crnn_resnet (EasyOCR / deep-text-recognition
style), ppocr_rec (PP-LCNetV3 + SVTR neck + CTC), svtr_tiny (local / global mixing), dbnet_r18,
dbnet_mbv3, craft (VGG16-BN U-Net), trocr_enc / trocr_dec (transformers), parseq_enc (timm ViT).
Audio: deepspeech2, rnnt_enc, crn, dccrn, dtln (streaming, states as inputs / outputs),
silero_vad, ds_cnn, gru_kws, lstm_state (h0 / c0 inputs), lstm_seqlens (sequence_lens),
bilstm_stream (batch_first, states out).
"""
from __future__ import annotations

import os
import sys


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import survey_torch_exports as common  # noqa: E402  (the shared survey part)
from survey_audio_models import audio_models  # noqa: E402
from survey_ocr_models import hf_ocr_models, ocr_models  # noqa: E402


def _models():
    import torch
    from torch import nn
    from torch.nn import functional as F
    out = {}
    out.update(ocr_models(torch, nn, F))
    out.update(hf_ocr_models(torch, nn))
    out.update(audio_models(torch, nn, F))
    return out


def export(out: str, names) -> int:
    os.makedirs(out, exist_ok=True)
    for name, (m, args) in _models().items():
        if names and name not in names:
            continue
        common.export_pair(m.eval(), args, out, name)
    return 0


def main(argv=None) -> int:
    return common.run(common.parser(__doc__), argv, {"export": lambda a: export(a.folder, a.names)})


if __name__ == "__main__":
    sys.exit(main())
