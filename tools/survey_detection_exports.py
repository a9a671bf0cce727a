"""Survey of detection and dense-prediction architectures as users export them: Hugging Face DETR,
Conditional-DETR, Deformable-DETR, RT-DETR (v1, v2), YOLOS, Table-Transformer, DPT (depth),
MaskFormer / Mask2Former, UperNet (ConvNeXt backbone) from small configs; ultralytics YOLOv8 / YOLO11
detect and segment models built from their yaml (with the decode head, as ``model.export(format=
"onnx")`` writes them, and YOLO11's NMS-free end2end head); random init, no download.

Needs torch and transformers, and for the YOLO models ultralytics (not project dependencies: a
learning tool for developers, never run by the tests). Export in a scratch venv, survey with the
project's venv:

    /tmp/venv/bin/python tools/survey_detection_exports.py export OUT_DIR [NAME ...]
    python tools/survey_detection_exports.py survey OUT_DIR [NAME ...] [--quant]

``survey`` is tools/survey_torch_exports.py's. Measured with it: docs/surveys/detection.md.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import survey_torch_exports as base  # noqa: E402

S = 128   # input H = W of the HF models


def _resnet(*stages):
    from transformers import ResNetConfig
    return ResNetConfig(embedding_size=32, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1], layer_type="basic",
                        out_features=[f"stage{i}" for i in stages])


def _rt_detr_kw(tr) -> dict:
    """A small RT-DETR (v1 and v2 take the same fields): ResNet-18-like backbone, 2 decoder layers."""
    return dict(backbone_config=tr.RTDetrResNetConfig(embedding_size=32, hidden_sizes=[32, 64, 128, 256],
                                                      depths=[1, 1, 1, 1], layer_type="basic",
                                                      out_features=["stage2", "stage3", "stage4"]),
                encoder_in_channels=[64, 128, 256], encoder_hidden_dim=64, encoder_ffn_dim=128,
                encoder_attention_heads=4, d_model=64, decoder_in_channels=[64, 64, 64], decoder_ffn_dim=128,
                decoder_attention_heads=4, decoder_layers=2, num_queries=30, num_labels=8, decoder_n_points=2)


def _detr_kw():
    return dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                encoder_ffn_dim=128, decoder_ffn_dim=128, num_queries=20, num_labels=8)


def _hf():
    """name -> (constructor, output names read from the model output, input size)."""
    import transformers as tr
    det = ("logits", "pred_boxes")
    return {
        "detr": (lambda: tr.DetrForObjectDetection(tr.DetrConfig(backbone_config=_resnet(4),
                                                                 **_detr_kw())), det, S),
        "conditional_detr": (lambda: tr.ConditionalDetrForObjectDetection(
            tr.ConditionalDetrConfig(backbone_config=_resnet(4), **_detr_kw())), det, S),
        "table_transformer": (lambda: tr.TableTransformerForObjectDetection(
            tr.TableTransformerConfig(backbone_config=_resnet(4), **_detr_kw())), det, S),
        "deformable_detr": (lambda: tr.DeformableDetrForObjectDetection(tr.DeformableDetrConfig(
            backbone_config=_resnet(2, 3, 4), num_feature_levels=3, encoder_n_points=2,
            decoder_n_points=2, two_stage=False, with_box_refine=False, **_detr_kw())), det, S),
        "rt_detr": (lambda: tr.RTDetrForObjectDetection(tr.RTDetrConfig(**_rt_detr_kw(tr))), det, S),
        "rt_detr_v2": (lambda: tr.RTDetrV2ForObjectDetection(tr.RTDetrV2Config(**_rt_detr_kw(tr))), det, S),
        "yolos": (lambda: tr.YolosForObjectDetection(tr.YolosConfig(
            image_size=[S, S], patch_size=16, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=256, num_detection_tokens=20, num_labels=8)), det, S),
        "dpt": (lambda: tr.DPTForDepthEstimation(tr.DPTConfig(
            image_size=S, patch_size=16, hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
            intermediate_size=256, backbone_out_indices=[0, 1, 2, 3], neck_hidden_sizes=[32, 64, 128, 128],
            fusion_hidden_size=64, head_in_index=-1)), ("predicted_depth",), S),
        "upernet_convnext": (lambda: tr.UperNetForSemanticSegmentation(tr.UperNetConfig(
            backbone_config=tr.ConvNextConfig(hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 2, 1],
                                              out_features=["stage1", "stage2", "stage3", "stage4"]),
            hidden_size=64, auxiliary_in_channels=128, num_labels=8)), ("logits",), S),
        "maskformer": (lambda: tr.MaskFormerForInstanceSegmentation(tr.MaskFormerConfig(
            backbone_config=tr.SwinConfig(image_size=S, embed_dim=32, depths=[1, 1, 1, 1], num_heads=[1, 2, 4, 8],
                                          window_size=4, out_features=["stage1", "stage2", "stage3", "stage4"]),
            fpn_feature_size=64, mask_feature_size=64, num_queries=20, num_labels=8,
            decoder_config=dict(model_type="detr", d_model=64, encoder_layers=1, decoder_layers=2,
                                encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                                decoder_ffn_dim=128, num_queries=20))),
            ("class_queries_logits", "masks_queries_logits"), S),
        "mask2former": (lambda: tr.Mask2FormerForUniversalSegmentation(tr.Mask2FormerConfig(
            backbone_config=tr.SwinConfig(image_size=S, embed_dim=32, depths=[1, 1, 1, 1], num_heads=[1, 2, 4, 8],
                                          window_size=4, out_features=["stage1", "stage2", "stage3", "stage4"]),
            feature_size=64, mask_feature_size=64, hidden_dim=64, encoder_feedforward_dim=128, dim_feedforward=128,
            encoder_layers=2, decoder_layers=3, num_attention_heads=4, num_queries=20, num_labels=8,
            common_stride=4)), ("class_queries_logits", "masks_queries_logits"), S),
    }


# HF's init (std 0.02 convs) leaves DPT's depth at ~1e-6, below fp16's normal range (and its QDQ
# output scale below fp16's subnormals): He-initialised convs give a trained net's scale instead
KAIMING = ("dpt",)


def _yolo(cfg: str, end2end: bool = False):
    def make():
        from ultralytics.nn.tasks import DetectionModel, SegmentationModel
        cls = SegmentationModel if "seg" in cfg else DetectionModel
        m = cls(cfg, nc=8, verbose=False)
        _stats(m)
        for mod in m.modules():     # what Exporter does before export: export mode, decode in the graph
            if hasattr(mod, "export"):
                mod.export = True
                mod.format = "onnx"
            if hasattr(mod, "one2one_cv2"):   # a head with an NMS-free one-to-one branch: choose it or not
                mod.end2end = end2end
        return m.fuse(verbose=False).eval()
    return make


def _stats(m, size: int = S) -> None:
    import survey_vision_exports as vision
    vision.realistic_stats(m, size)


YOLO = {   # name -> (constructor, input size)
    "yolov8n": (_yolo("yolov8n.yaml"), 320), "yolov8n_seg": (_yolo("yolov8n-seg.yaml"), 320),
    "yolo11n": (_yolo("yolo11n.yaml"), 320), "yolo11n_seg": (_yolo("yolo11n-seg.yaml"), 320),
    "yolo26n": (_yolo("yolo26n.yaml"), 320), "yolo26n_e2e": (_yolo("yolo26n.yaml", True), 320),
    "yolov10n_e2e": (_yolo("yolov10n.yaml", True), 320),
}


def export(out: str, names) -> int:
    import torch
    os.makedirs(out, exist_ok=True)
    class Wrap(torch.nn.Module):
        def __init__(self, m, keys):
            super().__init__()
            self.m, self.keys = m, keys

        def forward(self, x):
            o = self.m(pixel_values=x)
            return tuple(getattr(o, k) for k in self.keys)

    class First(torch.nn.Module):   # ultralytics' export outputs: decoded predictions (+ mask protos)
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            o = self.m(x)
            if isinstance(o, torch.Tensor):
                return o
            return tuple(t for t in o if isinstance(t, torch.Tensor))

    for name, (make, keys, size) in _hf().items():
        if names and name not in names:
            continue
        torch.manual_seed(0)
        try:
            m = make().eval()
        except Exception as exc:   # noqa: BLE001 - a survey: report and go on
            print("FAILED to build", name, type(exc).__name__, str(exc)[:300], flush=True)
            continue
        if name in KAIMING:
            with torch.no_grad():
                for mod in m.modules():
                    if isinstance(mod, (torch.nn.Conv2d, torch.nn.ConvTranspose2d)):
                        torch.nn.init.kaiming_normal_(mod.weight)
        _stats(m, size)
        base.export_pair(Wrap(m, keys).eval(), (torch.randn(1, 3, size, size),), out, name, no_grad=False,
                         skip_existing=True)
    for name, (make, size) in YOLO.items():
        if names and name not in names:
            continue
        torch.manual_seed(0)
        try:
            m = make().eval()
        except Exception as exc:   # noqa: BLE001
            print("FAILED to build", name, type(exc).__name__, str(exc)[:300], flush=True)
            continue
        base.export_pair(First(m).eval(), (torch.randn(1, 3, size, size),), out, name, skip_existing=True)
    return 0


def main(argv=None) -> int:
    return base.run(base.parser(__doc__), argv, {"export": lambda a: export(a.folder, a.names)})


if __name__ == "__main__":
    sys.exit(main())
