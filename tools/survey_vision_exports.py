"""Survey of real vision architectures: torchvision and timm classification, segmentation and
detection networks (random init: no download), exported with both torch exporters, then surveyed by
``tools/survey_torch_exports.py``'s ``survey`` (fp16, and with ``--quant`` quantize_static S8 / U8 QDQ
per-channel and quantize_dynamic without / with calibration).

Needs torch, torchvision and timm (not project dependencies: a learning tool for developers, never
run by the tests). Export in a scratch venv, survey with the project's venv:

    /tmp/venv/bin/python tools/survey_vision_exports.py export OUT_DIR [NAME ...]
    python tools/survey_vision_exports.py survey OUT_DIR [NAME ...] [--quant]

Detection models are exported without their postprocess (anchor decoding, NMS, top-k: data-dependent
shapes that stay on the CPU by design): backbone + FPN + heads, the raw box / class maps.
Measured with it: docs/surveys/vision.md.
"""
from __future__ import annotations

import os
import sys


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import survey_torch_exports  # noqa: E402  (tools/ is no package: the shared survey code)


def _tv(name, **kw):
    def make():
        import torchvision
        return torchvision.models.get_model(name, weights=None, **kw)
    return make


def _seg(name, **kw):
    def make():
        import torch
        import torchvision

        class Seg(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = torchvision.models.get_model(name, weights=None, weights_backbone=None, num_classes=8, **kw)

            def forward(self, x):
                return self.m(x)["out"]
        return Seg()
    return make


def _det(name, **kw):
    """backbone (+FPN) + head of a torchvision detector: the raw maps, no anchors / NMS (CPU by design)."""
    def make():
        import torch
        import torchvision

        class Det(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = torchvision.models.get_model(name, weights=None, weights_backbone=None, num_classes=8, **kw)

            def forward(self, x):
                f = self.m.backbone(x)
                feats = list(f.values()) if isinstance(f, dict) else [f]
                if hasattr(self.m, "rpn"):      # two-stage: the RPN head's objectness and deltas per level
                    obj, box = self.m.rpn.head(feats)
                    return tuple(obj) + tuple(box)
                out = self.m.head(feats)
                return tuple(out[k] for k in sorted(out))
        return Det()
    return make


def _timm(name, **kw):
    def make():
        import timm
        return timm.create_model(name, pretrained=False, **kw)
    return make


# name -> (constructor, input H = W)
MODELS = {
    # torchvision classification
    "resnet18": (_tv("resnet18"), 160), "resnet50": (_tv("resnet50"), 160),
    "mobilenet_v2": (_tv("mobilenet_v2"), 160), "mobilenet_v3_small": (_tv("mobilenet_v3_small"), 160),
    "mobilenet_v3_large": (_tv("mobilenet_v3_large"), 160), "efficientnet_b0": (_tv("efficientnet_b0"), 160),
    "efficientnet_v2_s": (_tv("efficientnet_v2_s"), 160), "regnet_y_400mf": (_tv("regnet_y_400mf"), 160),
    "convnext_tiny": (_tv("convnext_tiny"), 160), "shufflenet_v2_x1_0": (_tv("shufflenet_v2_x1_0"), 160),
    "squeezenet1_1": (_tv("squeezenet1_1"), 160), "mnasnet0_5": (_tv("mnasnet0_5"), 160),
    "densenet121": (_tv("densenet121"), 160), "googlenet": (_tv("googlenet", aux_logits=False, init_weights=True), 160),
    "inception_v3": (_tv("inception_v3", aux_logits=False, init_weights=True), 299),
    "vit_b_16": (_tv("vit_b_16", image_size=128), 128), "swin_t": (_tv("swin_t"), 224),
    "maxvit_t": (_tv("maxvit_t"), 224),
    # torchvision segmentation
    "deeplabv3_mobilenet_v3_large": (_seg("deeplabv3_mobilenet_v3_large"), 160),
    "lraspp_mobilenet_v3_large": (_seg("lraspp_mobilenet_v3_large"), 160),
    "fcn_resnet50": (_seg("fcn_resnet50"), 128),
    # torchvision detection, no postprocess
    "ssdlite320_mobilenet_v3_large": (_det("ssdlite320_mobilenet_v3_large"), 320),
    "retinanet_resnet50_fpn": (_det("retinanet_resnet50_fpn"), 256),
    "fcos_resnet50_fpn": (_det("fcos_resnet50_fpn"), 256),
    "fasterrcnn_mobilenet_v3_large_fpn": (_det("fasterrcnn_mobilenet_v3_large_fpn"), 256),
    # timm
    "t_efficientnet_lite0": (_timm("efficientnet_lite0"), 160), "t_mobilenetv3_large_100": (_timm("mobilenetv3_large_100"), 160),
    "t_ghostnet_100": (_timm("ghostnet_100"), 160), "t_repvgg_a0": (_timm("repvgg_a0"), 160),
    "t_cspdarknet53": (_timm("cspdarknet53"), 160), "t_regnety_002": (_timm("regnety_002"), 160),
    "t_hrnet_w18_small": (_timm("hrnet_w18_small"), 160), "t_convnext_atto": (_timm("convnext_atto"), 160),
    "t_poolformer_s12": (_timm("poolformer_s12"), 160), "t_mobilevit_xxs": (_timm("mobilevit_xxs"), 256),
    "t_efficientformer_l1": (_timm("efficientformer_l1"), 224), "t_levit_128s": (_timm("levit_128s"), 224),
    "t_deit_tiny_patch16_224": (_timm("deit_tiny_patch16_224"), 224), "t_resnest14d": (_timm("resnest14d"), 160),
    "t_dla34": (_timm("dla34"), 160),
}


def realistic_stats(m, size: int) -> None:
    """BatchNorm statistics from a forward pass on random images (random init's mean 0 / var 1 let deep
    nets such as Inception v3 reach 1e12, beyond fp16, where a trained net stays normalized), and a
    random head where the architecture initialises it to zero (torchvision's ViT: output = bias)."""
    import torch
    bns = [b for b in m.modules() if isinstance(b, torch.nn.modules.batchnorm._BatchNorm) and b.track_running_stats]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None          # cumulative average over the passes
    if bns:
        m.train()
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for _ in range(2):
                m(torch.randn(4, 3, size, size, generator=g))
        m.eval()
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, (torch.nn.Linear, torch.nn.Conv2d)) and not mod.weight.any():
                torch.nn.init.normal_(mod.weight, std=0.02)


def export(out: str, names) -> int:
    import torch
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
        realistic_stats(m, size)
        x = torch.randn(1, 3, size, size)
        # grad enabled, as users export: under no_grad nn.MultiheadAttention takes its fused fast path
        survey_torch_exports.export_pair(m, (x,), out, name, no_grad=False, skip_existing=True)
    return 0


def main(argv=None) -> int:
    return survey_torch_exports.run(survey_torch_exports.parser(__doc__), argv,
                                    {"export": lambda a: export(a.folder, a.names)})


if __name__ == "__main__":
    sys.exit(main())
