"""Survey of semantic-segmentation architectures as users export them: torchvision DeepLabV3
(MobileNetV3 / ResNet-50), LRASPP, FCN; segmentation_models_pytorch UNet / FPN / PSPNet /
DeepLabV3+ / Linknet (the decoders' upsampling: nearest, bilinear ``align_corners`` True / False,
ConvTranspose); Hugging Face SegFormer and UperNet (ConvNeXt) from small configs; and the two heads
users add: the class ArgMax (a label map) and a 512 x 512 map (speed). Random init, no download.

Needs torch, torchvision, transformers and ``segmentation_models_pytorch`` (``pip install --no-deps
--target DIR segmentation-models-pytorch``, then ``PYTHONPATH=DIR`` for ``export``); none are project
dependencies: a learning tool for developers, never run by the tests. Export in a scratch venv, survey
with the project's venv:

    /tmp/venv/bin/python tools/survey_segmentation_exports.py export OUT_DIR [NAME ...]
    python tools/survey_segmentation_exports.py survey OUT_DIR [NAME ...] [--quant]

``survey`` is tools/survey_torch_exports.py's. Measured with it: docs/surveys/segmentation.md.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import survey_torch_exports as base  # noqa: E402


def _tv(name, argmax=False, **kw):
    def make():
        import torch
        import torchvision

        class Seg(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = torchvision.models.get_model(name, weights=None, weights_backbone=None, num_classes=8, **kw)

            def forward(self, x):
                y = self.m(x)["out"]
                return y.argmax(1) if argmax else y
        return Seg()
    return make


def _smp(arch, encoder, **kw):
    def make():
        import segmentation_models_pytorch as smp
        return getattr(smp, arch)(encoder, encoder_weights=None, classes=4, **kw)
    return make


def _hf(kind):
    def make():
        import torch
        import transformers as tr
        if kind == "segformer":   # a MiT-b0-like encoder, 4 stages
            m = tr.SegformerForSemanticSegmentation(tr.SegformerConfig(
                hidden_sizes=[32, 64, 160, 256], depths=[1, 1, 1, 1], decoder_hidden_size=128, num_labels=8))
        else:                     # UperNet on a small ConvNeXt (PSP bins 1, 2, 3, 6 on an 8 x 8 map)
            m = tr.UperNetForSemanticSegmentation(tr.UperNetConfig(
                backbone_config=tr.ConvNextConfig(hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 2, 1],
                                                  out_features=["stage1", "stage2", "stage3", "stage4"]),
                hidden_size=64, auxiliary_in_channels=128, num_labels=8))

        class Logits(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = m

            def forward(self, x):
                return self.m(pixel_values=x).logits
        return Logits()
    return make


# name -> (constructor, input H = W)
MODELS = {
    "deeplabv3_mobilenet_v3_large": (_tv("deeplabv3_mobilenet_v3_large"), 256),
    "deeplabv3_resnet50": (_tv("deeplabv3_resnet50", aux_loss=False), 192),
    "lraspp_mobilenet_v3_large": (_tv("lraspp_mobilenet_v3_large"), 256),
    "fcn_resnet50": (_tv("fcn_resnet50", aux_loss=False), 192),
    "deeplabv3_mbv3_argmax": (_tv("deeplabv3_mobilenet_v3_large", argmax=True), 256),
    "lraspp_512": (_tv("lraspp_mobilenet_v3_large"), 512),
    "smp_unet_resnet18": (_smp("Unet", "resnet18"), 256),
    "smp_fpn_mobilenet_v2": (_smp("FPN", "mobilenet_v2"), 256),
    "smp_pspnet_resnet18": (_smp("PSPNet", "resnet18"), 256),
    "smp_deeplabv3plus_resnet18": (_smp("DeepLabV3Plus", "resnet18"), 256),
    "smp_linknet_resnet18": (_smp("Linknet", "resnet18"), 256),
    "segformer": (_hf("segformer"), 256),
    "upernet_convnext": (_hf("upernet"), 256),
}


def export(out: str, names) -> int:
    import torch
    import survey_vision_exports as vision
    os.makedirs(out, exist_ok=True)
    for name, (make, size) in MODELS.items():
        if names and name not in names:
            continue
        torch.manual_seed(0)
        try:
            m = make().eval()
        except Exception as exc:   # noqa: BLE001 - a survey: report and go on
            print("FAILED to build", name, type(exc).__name__, str(exc)[:200], flush=True)
            continue
        vision.realistic_stats(m, min(size, 256))
        base.export_pair(m, (torch.randn(1, 3, size, size),), out, name, no_grad=False, skip_existing=True)
    return 0


def main(argv=None) -> int:
    a = base.parser(__doc__).parse_intermixed_args(argv)
    if a.command == "export":
        return export(a.folder, a.names)
    return base.survey(a.folder, a.names, a.quant, a.clean)


if __name__ == "__main__":
    sys.exit(main())
