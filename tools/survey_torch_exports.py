"""Survey of real PyTorch exports: export Hugging Face architectures (random init from their
configs: no download) and torch modules with both exporters, quantize them the ways users do, convert
each with onnx_mrvl and compare with onnxruntime's run of the same model.

Needs torch and transformers (not project dependencies: a learning tool for developers, never run
by the tests). Install them into a scratch venv, export there, survey with the project's venv:

    /tmp/venv/bin/python tools/survey_torch_exports.py export OUT_DIR [NAME ...]
    python tools/survey_torch_exports.py survey OUT_DIR [NAME ...] [--quant]

``survey`` prints one line per model and form: regions, offload share, the ops left on the CPU,
max|err| / max|ref| and the share of output elements identical to onnxruntime's run of the same
model (what counts for QDQ models; a non-finite output is an error); with ``--quant`` also
quantize_static S8 / U8 (QDQ, per-channel) and quantize_dynamic, without and with calibration.
Measured with it (2026-11-26, docs/benchmarks-int8.md "Real PyTorch exports").
"""
from __future__ import annotations

import argparse
import collections
import glob
import os
import shutil
import sys
import time

import numpy as np

T = 32


def _hf_models():
    import torch
    from transformers import (BertConfig, BertModel, DistilBertConfig, DistilBertModel, GPT2Config, GPT2Model,
                              RobertaConfig, RobertaModel, ViTConfig, ViTModel, Wav2Vec2Config, Wav2Vec2Model,
                              WhisperConfig, WhisperModel)
    torch.manual_seed(0)
    ids = torch.randint(5, 1000, (1, T))
    am = torch.ones(1, T, dtype=torch.long)
    am[:, -6:] = 0
    text = dict(vocab_size=1000, num_attention_heads=4)
    return {
        "bert": (BertModel(BertConfig(hidden_size=128, num_hidden_layers=4, intermediate_size=512, **text)), "text", (ids, am)),
        "distilbert": (DistilBertModel(DistilBertConfig(vocab_size=1000, dim=128, n_layers=3, n_heads=4, hidden_dim=512)),
                       "text", (ids, am)),
        "roberta": (RobertaModel(RobertaConfig(hidden_size=128, num_hidden_layers=3, intermediate_size=512, **text)),
                    "text", (ids, am)),
        "gpt2": (GPT2Model(GPT2Config(vocab_size=1000, n_embd=128, n_layer=3, n_head=4, n_positions=64)), "gpt", (ids,)),
        "whisper": (WhisperModel(WhisperConfig(vocab_size=1000, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                               decoder_start_token_id=1, d_model=128, encoder_layers=2, decoder_layers=1,
                                               encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=256,
                                               decoder_ffn_dim=256, num_mel_bins=80, max_source_positions=100)),
                    "whisper", (torch.randn(1, 80, 200),)),
        "wav2vec2": (Wav2Vec2Model(Wav2Vec2Config(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                                  intermediate_size=256, conv_dim=(64, 64, 64), conv_stride=(5, 2, 2),
                                                  conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
                                                  num_conv_pos_embedding_groups=4)), "wav", (torch.randn(1, 4000),)),
        "vit": (ViTModel(ViTConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                                   image_size=64, patch_size=16)), "img", (torch.randn(1, 3, 64, 64),)),
    }


def _output(o):
    """The tensor a user reads: last_hidden_state, else the first tensor of the output."""
    import torch
    if isinstance(o, torch.Tensor):
        return o
    h = getattr(o, "last_hidden_state", None)
    return h if h is not None else o[0]


def export(out: str, names, models=None) -> int:
    """Export each model (name -> (module, kind, args)) with both exporters; ``kind`` is one of the
    strings below or a callable (module, *args) -> output."""
    import torch

    class Wrap(torch.nn.Module):
        def __init__(self, m, kind):
            super().__init__()
            self.m, self.kind = m, kind

        def forward(self, *a):
            if callable(self.kind):
                return _output(self.kind(self.m, *a))
            if self.kind == "text":
                o = self.m(input_ids=a[0], attention_mask=a[1])
            elif self.kind == "gpt":
                o = self.m(input_ids=a[0])
            elif self.kind == "whisper":
                o = self.m.encoder(input_features=a[0])
            elif self.kind == "wav":
                o = self.m(input_values=a[0])
            else:
                o = self.m(pixel_values=a[0])
            return o.last_hidden_state

    os.makedirs(out, exist_ok=True)
    for name, (m, kind, args) in (models if models is not None else _hf_models()).items():
        if names and name not in names:
            continue
        export_pair(Wrap(m.eval(), kind).eval(), args, out, name)
    return 0


def export_pair(module, args, out: str, name: str, *, no_grad: bool = True, skip_existing: bool = False) -> None:
    """``module(*args)`` exported by both exporters (TorchScript opset 17 ``NAME_ts.onnx``, dynamo
    opset 18 ``NAME_dynamo.onnx``) and ``args`` saved as ``NAME_feeds.npz`` for ``survey``. A failed
    export is printed, not raised (a survey goes on)."""
    import contextlib

    import torch
    for dynamo in (False, True):
        path = os.path.join(out, f"{name}_{'dynamo' if dynamo else 'ts'}.onnx")
        if skip_existing and os.path.exists(path):
            continue
        try:
            with torch.no_grad() if no_grad else contextlib.nullcontext():
                torch.onnx.export(module, args, path, opset_version=18 if dynamo else 17, dynamo=dynamo)
            print("exported", path, flush=True)
        except Exception as exc:   # noqa: BLE001 - a survey: report and go on
            print("FAILED", path, type(exc).__name__, str(exc)[:300], flush=True)
    np.savez(os.path.join(out, f"{name}_feeds.npz"), *[a.numpy() for a in args])


def _feeds(path: str, n: int, seed: int):
    import onnx
    base = os.path.basename(path).rsplit("_", 1)[0]
    arrs = list(np.load(os.path.join(os.path.dirname(path), f"{base}_feeds.npz")).values())
    names = [i.name for i in onnx.load(path, load_external_data=False).graph.input]
    rng = np.random.default_rng(seed)
    return [{k: (np.asarray(a + (0.1 * rng.standard_normal(a.shape)).astype(a.dtype)) if a.dtype.kind == "f" and j else a)
             for k, a in zip(names, arrs)} for j in range(n)]


def _input_shapes(src: str, model: str):
    """The feeds' shapes for the inputs of ``model`` with a symbolic or unknown dimension (what a user
    passes as ``input_shapes``); None when all are static."""
    import onnx
    feed = _feeds(src, 1, 0)[0]
    dims = {i.name: i.type.tensor_type.shape.dim for i in onnx.load(model, load_external_data=False).graph.input}
    shapes = {k: list(feed[k].shape) for k, d in dims.items() if k in feed and any(not x.HasField("dim_value") for x in d)}
    return shapes or None


feeds, input_shapes = _feeds, _input_shapes   # for the other survey tools (survey_trained_detection's int8)


def _line(tag: str, src: str, model: str, calibration, work: str) -> str:
    import onnxruntime as ort
    import onnx_mrvl
    try:
        t0 = time.perf_counter()
        r = onnx_mrvl.convert(model, calibration=calibration, input_shapes=_input_shapes(src, model))
        seconds = time.perf_counter() - t0
        folder = os.path.join(work, tag.replace(" ", "_"))
        r.save(folder, overwrite=True)
        sess = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx"))
        so = ort.SessionOptions()
        so.log_severity_level = 3
        ref = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        err, same, total = 0.0, 0, 0
        for f in _feeds(src, 3, 2):
            for a, b in zip(sess.run(None, f), ref.run(None, f)):
                if not np.isfinite(a).all():
                    raise ValueError("non-finite values in the converted model's output")
                a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)   # uint8 codes: no wrap-around
                err = max(err, float(np.abs(a64 - b64).max() / (np.abs(b64).max() or 1)))
                same, total = same + int(np.count_nonzero(a == b)), total + a.size
    except Exception as exc:   # noqa: BLE001 - a survey: report and go on
        return f"{tag}: {type(exc).__name__}: {str(exc)[:200]}"
    finally:   # the converted folder (hundreds of MB for a ResNet-50) is not kept
        shutil.rmtree(os.path.join(work, tag.replace(" ", "_")), ignore_errors=True)
    cpu = collections.Counter(d.op_type for d in r.report.cpu_nodes())
    return (f"{tag}: regions {len(r.report.regions)} offload {r.report.offload_fraction:.3f} "
            f"cpu {dict(cpu) or '-'} err vs onnxruntime {err:.2e} identical {100.0 * same / max(total, 1):.1f}% "
            f"convert {seconds:.1f}s")


def survey(folder: str, names, quant: bool, clean: bool = False) -> int:
    """One line per export and form (see the module docstring); ``clean``: the quantized models of
    each export are deleted once its lines are printed (a large survey fills the disk otherwise)."""
    import logging
    logging.disable(logging.WARNING)
    work = os.path.join(folder, "survey")
    os.makedirs(work, exist_ok=True)
    for src in sorted(glob.glob(os.path.join(folder, "*.onnx"))):
        name = os.path.basename(src)[:-5]
        if names and not any(n in name for n in names):
            continue
        print(_line(f"{name} fp16", src, src, None, work), flush=True)
        if not quant:
            continue
        from onnxruntime import quantization as q
        calib = _feeds(src, 8, 1)
        for kind in ("s8", "u8", "dyn"):
            dst = os.path.join(work, f"{name}_{kind}.onnx")
            try:
                if kind == "dyn":
                    q.quantize_dynamic(src, dst, weight_type=q.QuantType.QInt8)
                else:
                    data = iter(calib)

                    class Reader(q.CalibrationDataReader):
                        def get_next(self):
                            return next(data, None)

                    act = q.QuantType.QInt8 if kind == "s8" else q.QuantType.QUInt8
                    q.quantize_static(src, dst, Reader(), quant_format=q.QuantFormat.QDQ, per_channel=True,
                                      activation_type=act, weight_type=q.QuantType.QInt8)
            except Exception as exc:   # noqa: BLE001
                print(f"{name} {kind}: quantizer failed: {type(exc).__name__}: {str(exc)[:150]}")
                continue
            for cal in ([None, calib] if kind == "dyn" else [None]):
                print(_line(f"{name} {kind}{' +calibration' if cal else ''}", src, dst, cal, work), flush=True)
            if clean:
                for f in glob.glob(os.path.join(work, f"{name}_{kind}.onnx*")):
                    os.remove(f)
    return 0


def parser(doc: str, commands=("export", "survey")) -> argparse.ArgumentParser:
    """The survey tools' command line: COMMAND FOLDER [NAME ...] [--quant] [--clean]; each tool adds
    its own export options."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=list(commands))
    ap.add_argument("folder")
    ap.add_argument("names", nargs="*")
    ap.add_argument("--quant", action="store_true", help="survey: also QDQ S8 / U8 and dynamic int8 (+ calibration)")
    ap.add_argument("--clean", action="store_true",
                    help="survey: delete each export's quantized models once its lines are printed")
    return ap


def run(ap: argparse.ArgumentParser, argv, commands, survey_fn=None) -> int:
    """Parse ``argv`` with ``ap`` (from ``parser``) and run its command: ``commands[name](args)``, or
    for ``survey`` (when ``commands`` has no handler of its own) ``survey_fn`` (this module's loop by
    default) on FOLDER, the NAMEs, ``--quant`` and ``--clean``."""
    a = ap.parse_intermixed_args(argv)
    if a.command in commands:
        return commands[a.command](a)
    return (survey_fn or survey)(a.folder, a.names, a.quant, a.clean)


def models_out(ap: argparse.ArgumentParser, a) -> str:
    """OUT of ``COMMAND MODELS OUT`` (FOLDER is MODELS there, the one NAME the output folder)."""
    if len(a.names) != 1:
        ap.error(f"{a.command} MODELS OUT")
    return a.names[0]


def main(argv=None) -> int:
    return run(parser(__doc__), argv, {"export": lambda a: export(a.folder, a.names)})


if __name__ == "__main__":
    sys.exit(main())
