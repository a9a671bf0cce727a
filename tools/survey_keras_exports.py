"""Survey of real TensorFlow / Keras exports: build keras.applications and Keras functional models
(random init, ``weights=None``: no download), convert them with tf2onnx the ways users do (a
``tf.function`` at opset 13 and 17; full-integer TFLite models with int8 / uint8 / float I/O through
``tf2onnx.convert --tflite``, with and without ``--dequantize``), then survey them with the survey
part of ``tools/survey_torch_exports.py`` (onnx_mrvl against onnxruntime's run of the same model).

Needs tensorflow-cpu and tf2onnx (not project dependencies: a learning tool for developers, never run
by the tests). Install them into a scratch venv, export there, survey with the project's venv:

    python3 -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu tf2onnx
    /tmp/tfvenv/bin/python tools/survey_keras_exports.py export OUT_DIR [NAME ...] [--tflite]
    python tools/survey_keras_exports.py survey OUT_DIR [NAME ...] [--quant]

Files: ``<name>_op13.onnx`` / ``<name>_op17.onnx`` (float), ``<name>-tfl<io>_tflite.onnx`` and
``<name>-tfl<io>_deq.onnx`` (TFLite int8, io = i8 / u8 / f32; ``deq``: ``--dequantize``), each
base with its ``<base>_feeds.npz``. ``--quant`` only makes sense for the float files: select them
by name (``survey OUT _op13 --quant``). ``rnn_*``: Keras recurrent layers alone (Keras 3 writes each as
an ONNX ``Loop``: legalize's ``loop_to_rnn``). Measured with it: docs/surveys/tensorflow.md.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

import numpy as np

SIZE = 96


def _apps(keras):
    a = keras.applications
    kw = dict(weights=None, classes=100)
    return {
        "mobilenetv2": lambda: a.MobileNetV2(input_shape=(SIZE, SIZE, 3), **kw),
        "mobilenetv3small": lambda: a.MobileNetV3Small(input_shape=(SIZE, SIZE, 3), **kw),
        "mobilenetv3large": lambda: a.MobileNetV3Large(input_shape=(SIZE, SIZE, 3), **kw),
        "efficientnetb0": lambda: a.EfficientNetB0(input_shape=(SIZE, SIZE, 3), **kw),
        "efficientnetv2b0": lambda: a.EfficientNetV2B0(input_shape=(SIZE, SIZE, 3), **kw),
        "resnet50": lambda: a.ResNet50(input_shape=(SIZE, SIZE, 3), **kw),
        "resnet50v2": lambda: a.ResNet50V2(input_shape=(SIZE, SIZE, 3), **kw),
        "densenet121": lambda: a.DenseNet121(input_shape=(SIZE, SIZE, 3), **kw),
        "inceptionv3": lambda: a.InceptionV3(input_shape=(SIZE, SIZE, 3), **kw),
        "xception": lambda: a.Xception(input_shape=(SIZE, SIZE, 3), **kw),
        "nasnetmobile": lambda: a.NASNetMobile(input_shape=(SIZE, SIZE, 3), **kw),
        "convnexttiny": lambda: a.ConvNeXtTiny(input_shape=(SIZE, SIZE, 3), **kw),
    }


def _custom(keras, tf):
    L = keras.layers

    def blocks():   # SeparableConv2D, DepthwiseConv2D, Conv2DTranspose, UpSampling2D, BN, tf.image.resize
        x = i = keras.Input((64, 64, 3))
        x = L.Conv2D(16, 3, strides=2, padding="same", use_bias=False)(x)
        x = L.BatchNormalization()(x)
        x = L.ReLU(6.0)(x)
        x = L.DepthwiseConv2D(3, padding="same")(x)
        x = L.BatchNormalization()(x)
        x = L.Activation("swish")(x)
        x = L.SeparableConv2D(32, 3, strides=2, padding="same")(x)
        x = L.LeakyReLU(0.1)(x)
        y = L.UpSampling2D(2, interpolation="nearest")(x)
        z = L.UpSampling2D(2, interpolation="bilinear")(x)
        t = L.Conv2DTranspose(32, 3, strides=2, padding="same")(x)
        x = L.Concatenate()([y, z, t])
        x = L.Conv2D(24, 1, activation="sigmoid")(x)
        x = L.Lambda(lambda v: tf.image.resize(v, (48, 48)))(x)
        x = L.MaxPooling2D(2)(x)
        x = L.GlobalAveragePooling2D()(x)
        x = L.Dense(10, activation="softmax")(x)
        return keras.Model(i, x)

    def unet():
        x = i = keras.Input((64, 64, 3))
        skips = []
        for c in (16, 32, 64):
            x = L.Conv2D(c, 3, padding="same", activation="relu")(x)
            x = L.Conv2D(c, 3, padding="same", activation="relu")(x)
            skips.append(x)
            x = L.MaxPooling2D(2)(x)
        x = L.Conv2D(128, 3, padding="same", activation="relu")(x)
        for c, s in zip((64, 32, 16), reversed(skips)):
            x = L.Conv2DTranspose(c, 2, strides=2, padding="same")(x)
            x = L.Concatenate()([x, s])
            x = L.Conv2D(c, 3, padding="same", activation="relu")(x)
        x = L.Conv2D(3, 1, activation="softmax")(x)
        return keras.Model(i, x)

    def crnn():   # OCR: Conv + BiLSTM + BiGRU + Dense + softmax
        x = i = keras.Input((32, 128, 1))
        for c in (32, 64):
            x = L.Conv2D(c, 3, padding="same", activation="relu")(x)
            x = L.BatchNormalization()(x)
            x = L.MaxPooling2D(2)(x)
        x = L.Conv2D(96, 3, padding="same", activation="relu")(x)
        x = L.MaxPooling2D((2, 1))(x)
        x = L.Permute((2, 1, 3))(x)                 # [N, W, H, C]
        x = L.Reshape((32, 4 * 96))(x)
        x = L.Dense(64, activation="relu")(x)
        x = L.Bidirectional(L.LSTM(64, return_sequences=True))(x)
        x = L.Bidirectional(L.GRU(48, return_sequences=True))(x)
        x = L.Dense(40, activation="softmax")(x)
        return keras.Model(i, x)

    def audio():  # Conv1D + LSTM / GRU
        x = i = keras.Input((100, 40))
        x = L.Conv1D(64, 5, padding="same", activation="relu")(x)
        x = L.Conv1D(64, 3, strides=2, padding="causal", activation="relu")(x)
        x = L.LSTM(64, return_sequences=True)(x)
        x = L.GRU(64)(x)
        x = L.Dense(12, activation="softmax")(x)
        return keras.Model(i, x)

    def transformer():   # MultiHeadAttention + LayerNormalization encoder
        x = i = keras.Input((32, 64))
        x = L.Dense(64)(x)
        for _ in range(2):
            a = L.MultiHeadAttention(num_heads=4, key_dim=16)(x, x)
            x = L.LayerNormalization(epsilon=1e-6)(x + a)
            # Keras' exact "gelu" is erfc(), which tf2onnx 1.17 writes as an op ONNX has no "Erfc":
            # onnxruntime and onnx_mrvl refuse that model (docs/surveys/tensorflow.md); tanh form here
            f = L.Dense(128, activation=lambda v: keras.activations.gelu(v, approximate=True))(x)
            f = L.Dense(64)(f)
            x = L.LayerNormalization(epsilon=1e-6)(x + f)
        x = L.GlobalAveragePooling1D()(x)
        x = L.Dense(10)(x)
        return keras.Model(i, x)

    def rnn(build, steps=24, feat=16):   # recurrent layers alone (Keras 3: tf2onnx writes Loops)
        def make():
            x = i = keras.Input((steps, feat))
            return keras.Model(i, build(x))
        return make

    rnns = {
        "rnn_lstm": rnn(lambda x: L.LSTM(32, return_sequences=True)(x)),
        "rnn_gru_last": rnn(lambda x: L.GRU(32)(x)),
        "rnn_gru_v1": rnn(lambda x: L.GRU(32, return_sequences=True, reset_after=False)(x)),
        "rnn_bilstm_last": rnn(lambda x: L.Bidirectional(L.LSTM(32))(x)),
        "rnn_stacked_back": rnn(lambda x: L.GRU(24, go_backwards=True)(L.LSTM(32, return_sequences=True)(x))),
        "rnn_state": rnn(lambda x: L.Concatenate()(L.LSTM(32, return_state=True)(x))),
        "rnn_masked": rnn(lambda x: L.LSTM(32, return_sequences=True)(L.Masking(0.0)(x))),
    }
    return {"blocks": blocks, "unet": unet, "crnn": crnn, "audio": audio, "transformer": transformer, **rnns}


TFLITE = ("mobilenetv2", "blocks", "efficientnetb0", "resnet50", "unet", "transformer", "crnn")


def _representative(shape, n=16, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, (1,) + tuple(shape)).astype(np.float32) for _ in range(n)]


def _tflite(tf, fn, shape, io, path):
    conv = tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()])
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    data = _representative(shape)
    conv.representative_dataset = lambda: ([d] for d in data)
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    if io != "f32":
        conv.inference_input_type = conv.inference_output_type = tf.int8 if io == "i8" else tf.uint8
    with open(path, "wb") as f:
        f.write(conv.convert())
    interp = tf.lite.Interpreter(model_path=path)
    d = interp.get_input_details()[0]
    return d["quantization"], d["dtype"]


def _from_frozen(tf, tf2onnx, fn, opset, path):
    """tf2onnx of the function with its captured tensors and variables frozen to constants."""
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2
    frozen = convert_variables_to_constants_v2(fn.get_concrete_function())
    gd = frozen.graph.as_graph_def()
    ins = [t.name for t in frozen.inputs if t.dtype != tf.resource]
    outs = [t.name for t in frozen.outputs]
    tf2onnx.convert.from_graph_def(gd, input_names=ins, output_names=outs, opset=opset, output_path=path)


def export(out: str, names, tflite: bool, legacy: bool = False) -> int:
    if legacy:   # Keras 2 (tf_keras, TF_USE_LEGACY_KERAS=1): files named <name>-k2_...
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf
    import tf2onnx
    if legacy:
        import tf_keras as keras
    else:
        import keras
    os.makedirs(out, exist_ok=True)
    keras.utils.set_random_seed(0)
    build = dict(_apps(keras))
    build.update(_custom(keras, tf))
    for key, make in build.items():
        if names and key not in names:
            continue
        name = f"{key}-k2" if legacy else key
        try:
            model = make()
        except Exception as exc:   # noqa: BLE001 - a survey: report and go on
            print("FAILED build", name, type(exc).__name__, str(exc)[:200], flush=True)
            continue
        shape = tuple(model.inputs[0].shape[1:])
        spec = [tf.TensorSpec((1,) + shape, tf.float32, name="input")]
        fn = tf.function(lambda x: model(x, training=False), input_signature=spec)
        x = np.random.default_rng(0).uniform(-1, 1, (1,) + shape).astype(np.float32)
        np.savez(os.path.join(out, f"{name}_feeds.npz"), x)
        for opset in (13, 17):
            path = os.path.join(out, f"{name}_op{opset}.onnx")
            try:
                proto, _ = tf2onnx.convert.from_function(fn, input_signature=spec, opset=opset, output_path=path)
                if len(proto.graph.input) > 1:   # captured tensors (Keras 3 Normalization) became inputs
                    _from_frozen(tf, tf2onnx, fn, opset, path)
                print("exported", path, flush=True)
            except Exception as exc:   # noqa: BLE001
                print("FAILED", path, type(exc).__name__, str(exc)[:200], flush=True)
        if not tflite or key not in TFLITE:
            continue
        for io in ("i8", "u8", "f32"):
            base = f"{name}-tfl{io}"
            tfl = os.path.join(out, f"{base}.tflite")
            try:
                (scale, zp), dtype = _tflite(tf, fn, shape, io, tfl)
            except Exception as exc:   # noqa: BLE001
                print("FAILED tflite", base, type(exc).__name__, str(exc)[:200], flush=True)
                continue
            xin = x if io == "f32" else np.clip(np.round(x / scale) + zp, *{"i8": (-128, 127), "u8": (0, 255)}[io]).astype(dtype)
            np.savez(os.path.join(out, f"{base}_feeds.npz"), xin)
            for form, extra in (("tflite", []), ("deq", ["--dequantize"])):
                path = os.path.join(out, f"{base}_{form}.onnx")
                r = subprocess.run([sys.executable, "-m", "tf2onnx.convert", "--tflite", tfl, "--output", path,
                                    "--opset", "13"] + extra, capture_output=True, text=True)
                print("exported" if r.returncode == 0 else "FAILED", path,
                      "" if r.returncode == 0 else r.stderr[-300:], flush=True)
    return 0


def survey(folder: str, names, quant: bool) -> int:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import survey_torch_exports
    return survey_torch_exports.survey(folder, names, quant)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["export", "survey"])
    ap.add_argument("folder")
    ap.add_argument("names", nargs="*")
    ap.add_argument("--tflite", action="store_true", help="export: also full-integer TFLite models via tf2onnx")
    ap.add_argument("--legacy", action="store_true", help="export: Keras 2 (tf_keras) instead of Keras 3")
    ap.add_argument("--quant", action="store_true", help="survey: also QDQ S8 / U8 and dynamic int8 (+ calibration)")
    a = ap.parse_args(argv)
    return export(a.folder, a.names, a.tflite, a.legacy) if a.command == "export" else survey(a.folder, a.names, a.quant)


if __name__ == "__main__":
    sys.exit(main())
