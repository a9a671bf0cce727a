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

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import survey_torch_exports as common  # noqa: E402  (the shared survey part)


def _ocr_models(torch, nn, F):  # noqa: C901 - one place for the OCR family
    class BiLSTM(nn.Module):
        """crnn.pytorch / deep-text-recognition's BidirectionalLSTM: LSTM + Linear."""

        def __init__(self, nin, nh, nout, batch_first=False):
            super().__init__()
            self.rnn = nn.LSTM(nin, nh, bidirectional=True, batch_first=batch_first)
            self.fc = nn.Linear(2 * nh, nout)

        def forward(self, x):
            y, _ = self.rnn(x)
            return self.fc(y)

    class CRNNVGG(nn.Module):
        """meijieru/crnn.pytorch: VGG-style CNN, squeeze(2), permute(2, 0, 1), 2 BiLSTMs, log_softmax."""

        def __init__(self, nclass=37, nh=64):
            super().__init__()
            cfg = [(1, 32, True, (2, 2)), (32, 64, False, (2, 2)), (64, 128, True, None),
                   (128, 128, False, ((2, 2), (2, 1), (0, 1))), (128, 256, True, None),
                   (256, 256, False, ((2, 2), (2, 1), (0, 1)))]
            layers = []
            for ci, co, bn, pool in cfg:
                layers += [nn.Conv2d(ci, co, 3, 1, 1)] + ([nn.BatchNorm2d(co)] if bn else []) + [nn.ReLU(True)]
                if pool == (2, 2):
                    layers.append(nn.MaxPool2d(2, 2))
                elif pool:
                    layers.append(nn.MaxPool2d(*pool))
            layers += [nn.Conv2d(256, 256, 2, 1, 0), nn.BatchNorm2d(256), nn.ReLU(True)]
            self.cnn = nn.Sequential(*layers)
            self.rnn = nn.Sequential(BiLSTM(256, nh, nh), BiLSTM(nh, nh, nclass))

        def forward(self, x):
            c = self.cnn(x)
            c = c.squeeze(2).permute(2, 0, 1)
            return F.log_softmax(self.rnn(c), dim=2)

    class Basic(nn.Module):
        def __init__(self, ci, co, stride=1):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(ci, co, 3, stride, 1, bias=False), nn.BatchNorm2d(co)
            self.c2, self.b2 = nn.Conv2d(co, co, 3, 1, 1, bias=False), nn.BatchNorm2d(co)
            self.down = None if ci == co and stride == 1 else nn.Sequential(
                nn.Conv2d(ci, co, 1, stride, bias=False), nn.BatchNorm2d(co))

        def forward(self, x):
            y = self.b2(self.c2(F.relu(self.b1(self.c1(x)))))
            return F.relu(y + (x if self.down is None else self.down(x)))

    class CRNNResNet(nn.Module):
        """deep-text-recognition-benchmark / EasyOCR: ResNet feature extractor, AdaptiveAvgPool2d((None, 1))
        over permute(0, 3, 1, 2), 2 batch-first BiLSTMs, Linear (CTC logits)."""

        def __init__(self, nclass=97, nh=64):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(1, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(True),
                                      nn.MaxPool2d(2, 2))
            self.l1 = nn.Sequential(Basic(32, 64), nn.MaxPool2d(2, 2))
            self.l2 = nn.Sequential(Basic(64, 128), Basic(128, 128), nn.MaxPool2d(2, (2, 1), (0, 1)))
            self.l3 = nn.Sequential(Basic(128, 256), Basic(256, 256),
                                    nn.Conv2d(256, 256, 2, (2, 1), (0, 1), bias=False), nn.BatchNorm2d(256), nn.ReLU(True))
            self.pool = nn.AdaptiveAvgPool2d((None, 1))
            self.seq = nn.Sequential(BiLSTM(256, nh, nh, True), BiLSTM(nh, nh, nh, True))
            self.pred = nn.Linear(nh, nclass)

        def forward(self, x):
            v = self.l3(self.l2(self.l1(self.stem(x))))
            v = self.pool(v.permute(0, 3, 1, 2)).squeeze(3)
            return self.pred(self.seq(v))

    def hs_conv(ci, co, k, s, g=1, act=True):
        return nn.Sequential(nn.Conv2d(ci, co, k, s, k // 2, groups=g, bias=False), nn.BatchNorm2d(co),
                             *([nn.Hardswish()] if act else []))

    class SE(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.c1, self.c2 = nn.Conv2d(c, c // 4, 1), nn.Conv2d(c // 4, c, 1)

        def forward(self, x):
            return x * F.hardsigmoid(self.c2(F.relu(self.c1(self.pool(x)))))

    class LCNet(nn.Module):
        """PP-LCNet(V3)-style rec backbone: depthwise-separable blocks, hardswish, SE, (2, 1) strides."""

        def __init__(self):
            super().__init__()
            cfg = [(16, 32, 3, 1, False), (32, 64, 3, 2, False), (64, 64, 3, 1, False), (64, 128, 3, (2, 1), False),
                   (128, 128, 5, 1, False), (128, 256, 5, (2, 1), True), (256, 256, 5, 1, True)]
            self.stem = hs_conv(3, 16, 3, 2)
            blocks = []
            for ci, co, k, s, se in cfg:
                blocks.append(nn.Sequential(hs_conv(ci, ci, k, s, g=ci), *([SE(ci)] if se else []), hs_conv(ci, co, 1, 1)))
            self.blocks = nn.Sequential(*blocks)
            self.pool = nn.AdaptiveAvgPool2d((1, 40)) if False else nn.AvgPool2d((2, 2), (2, 2))

        def forward(self, x):
            return self.pool(self.blocks(self.stem(x)))

    class Attn(nn.Module):
        """SVTR / PaddleOCR Attention: qkv Linear, reshape / permute to heads, optional additive mask."""

        def __init__(self, d, heads, mask=None):
            super().__init__()
            self.h, self.scale = heads, (d // heads) ** -0.5
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.register_buffer("mask", mask if mask is not None else torch.zeros(0), persistent=False)

        def forward(self, x):
            b, n, c = x.shape
            qkv = self.qkv(x).reshape(b, n, 3, self.h, c // self.h).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0] * self.scale, qkv[1], qkv[2]
            a = q.matmul(k.permute(0, 1, 3, 2))
            if self.mask.numel():
                a = a + self.mask
            a = F.softmax(a, dim=-1)
            return self.proj((a.matmul(v)).permute(0, 2, 1, 3).reshape(b, n, c))

    class Block(nn.Module):
        def __init__(self, d, heads, mask=None, eps=1e-6, act=nn.GELU):
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(d, eps=eps), nn.LayerNorm(d, eps=eps)
            self.attn = Attn(d, heads, mask)
            self.mlp = nn.Sequential(nn.Linear(d, 2 * d), act(), nn.Linear(2 * d, d))

        def forward(self, x):
            x = x + self.attn(self.n1(x))
            return x + self.mlp(self.n2(x))

    class PPOCRRec(nn.Module):
        """PP-OCRv3/v4 rec: LCNet backbone, EncoderWithSVTR neck (conv, flatten(2).permute(0, 2, 1),
        transformer blocks (Swish MLP), reshape back, concat shortcut, conv), then squeeze + CTC head."""

        def __init__(self, nclass=97, d=64):
            super().__init__()
            self.backbone = LCNet()
            c = 256
            self.conv1, self.conv2 = hs_conv(c, c // 8, 3, 1), hs_conv(c // 8, d, 1, 1)
            self.blocks = nn.Sequential(Block(d, 2, act=nn.SiLU), Block(d, 2, act=nn.SiLU))
            self.norm = nn.LayerNorm(d, eps=1e-6)
            self.conv3, self.conv4 = hs_conv(d, c, 1, 1), hs_conv(2 * c, c // 8, 3, 1)
            self.conv1x1 = hs_conv(c // 8, d, 1, 1)
            self.fc = nn.Linear(d, nclass)

        def forward(self, x):
            x = self.backbone(x)
            h = x
            z = self.conv2(self.conv1(x))
            b, c, hh, w = z.shape
            z = self.norm(self.blocks(z.flatten(2).permute(0, 2, 1)))
            z = self.conv3(z.reshape(b, hh, w, c).permute(0, 3, 1, 2))
            z = self.conv1x1(self.conv4(torch.cat((h, z), dim=1)))
            z = z.squeeze(2).permute(0, 2, 1)
            return F.softmax(self.fc(z), dim=2)

    def local_mask(h, w, kh, kw):
        m = torch.ones(h * w, h + kh - 1, w + kw - 1)
        for i in range(h):
            for j in range(w):
                m[i * w + j, i:i + kh, j:j + kw] = 0.0
        m = m[:, kh // 2:h + kh // 2, kw // 2:w + kw // 2].flatten(1)
        return m.masked_fill(m == 1, float("-inf")).unsqueeze(0).unsqueeze(0)

    class SVTRTiny(nn.Module):
        """SVTR-T: 2 stride-2 conv patch embedding, Local (masked 7x11) / Global mixing stages with
        conv merging (stride (2, 1)) between them, AdaptiveAvgPool to width, Hardswish, CTC Linear."""

        def __init__(self, nclass=97, dims=(64, 128, 160), heads=(2, 4, 5)):
            super().__init__()
            self.embed = nn.Sequential(nn.Conv2d(3, dims[0] // 2, 3, 2, 1), nn.BatchNorm2d(dims[0] // 2), nn.GELU(),
                                       nn.Conv2d(dims[0] // 2, dims[0], 3, 2, 1), nn.BatchNorm2d(dims[0]), nn.GELU())
            self.hw = [(8, 32), (4, 32), (2, 32)]
            self.pos = nn.Parameter(torch.randn(1, 8 * 32, dims[0]) * 0.02)
            self.s1 = nn.Sequential(Block(dims[0], heads[0], local_mask(8, 32, 7, 11)), Block(dims[0], heads[0]))
            self.m1 = nn.Conv2d(dims[0], dims[1], 3, (2, 1), 1)
            self.n1 = nn.LayerNorm(dims[1])
            self.s2 = nn.Sequential(Block(dims[1], heads[1], local_mask(4, 32, 7, 11)), Block(dims[1], heads[1]))
            self.m2 = nn.Conv2d(dims[1], dims[2], 3, (2, 1), 1)
            self.n2 = nn.LayerNorm(dims[2])
            self.s3 = nn.Sequential(Block(dims[2], heads[2]), Block(dims[2], heads[2]))
            self.norm = nn.LayerNorm(dims[2], eps=1e-6)
            self.pool = nn.AdaptiveAvgPool2d((1, 32))
            self.last = nn.Conv2d(dims[2], 192, 1, bias=False)
            self.fc = nn.Linear(192, nclass)

        def _merge(self, x, hw, conv, norm):
            b, n, c = x.shape
            x = conv(x.permute(0, 2, 1).reshape(b, c, *hw))
            return norm(x.flatten(2).permute(0, 2, 1))

        def forward(self, x):
            x = self.embed(x).flatten(2).permute(0, 2, 1) + self.pos
            x = self._merge(self.s1(x), self.hw[0], self.m1, self.n1)
            x = self._merge(self.s2(x), self.hw[1], self.m2, self.n2)
            x = self.norm(self.s3(x))
            b, n, c = x.shape
            x = self.pool(x.permute(0, 2, 1).reshape(b, c, *self.hw[2]))
            x = F.hardswish(self.last(x))
            return self.fc(x.squeeze(2).permute(0, 2, 1))

    class DBHead(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.b = nn.Sequential(nn.Conv2d(c, c // 4, 3, 1, 1, bias=False), nn.BatchNorm2d(c // 4), nn.ReLU(True),
                                   nn.ConvTranspose2d(c // 4, c // 4, 2, 2), nn.BatchNorm2d(c // 4), nn.ReLU(True),
                                   nn.ConvTranspose2d(c // 4, 1, 2, 2), nn.Sigmoid())

        def forward(self, x):
            return self.b(x)

    class DBNet(nn.Module):
        """DBNet (MhLiao/DB, PaddleOCR DBFPN): backbone stages C2-C5, FPN (1x1 laterals, nearest x2
        upsample + add, 3x3 smooth, upsample to 1/4, concat), probability / threshold heads with
        ConvTranspose2d, the differentiable binarization 1 / (1 + exp(-k (P - T)))."""

        def __init__(self, backbone, chans, inner=64):
            super().__init__()
            self.backbone = backbone
            self.lat = nn.ModuleList([nn.Conv2d(c, inner, 1, bias=False) for c in chans])
            self.smooth = nn.ModuleList([nn.Conv2d(inner, inner // 4, 3, 1, 1, bias=False) for _ in chans])
            self.prob, self.thresh = DBHead(inner), DBHead(inner)

        def forward(self, x):
            c2, c3, c4, c5 = self.backbone(x)
            in5, in4, in3, in2 = [l(c) for l, c in zip(self.lat[::-1], (c5, c4, c3, c2))]
            out4 = in4 + F.interpolate(in5, scale_factor=2, mode="nearest")
            out3 = in3 + F.interpolate(out4, scale_factor=2, mode="nearest")
            out2 = in2 + F.interpolate(out3, scale_factor=2, mode="nearest")
            p5, p4, p3, p2 = [s(o) for s, o in zip(self.smooth[::-1], (in5, out4, out3, out2))]
            p5 = F.interpolate(p5, scale_factor=8, mode="nearest")
            p4 = F.interpolate(p4, scale_factor=4, mode="nearest")
            p3 = F.interpolate(p3, scale_factor=2, mode="nearest")
            fuse = torch.cat([p5, p4, p3, p2], 1)
            p, t = self.prob(fuse), self.thresh(fuse)
            b = torch.reciprocal(1 + torch.exp(-50 * (p - t)))
            return torch.cat([p, t, b], 1)

    class R18(nn.Module):
        def __init__(self):
            super().__init__()
            import torchvision
            r = torchvision.models.resnet18(weights=None)
            self.stem = nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool)
            self.layers = nn.ModuleList([r.layer1, r.layer2, r.layer3, r.layer4])

        def forward(self, x):
            x, outs = self.stem(x), []
            for l in self.layers:
                x = l(x)
                outs.append(x)
            return outs

    class MBV3(nn.Module):
        def __init__(self):
            super().__init__()
            import torchvision
            f = torchvision.models.mobilenet_v3_small(weights=None).features
            self.stages = nn.ModuleList([f[:2], f[2:4], f[4:9], f[9:]])

        def forward(self, x):
            outs = []
            for s in self.stages:
                x = s(x)
                outs.append(x)
            return outs

    class DoubleConv(nn.Module):
        def __init__(self, ci, cm, co):
            super().__init__()
            self.conv = nn.Sequential(nn.Conv2d(ci + cm, cm, 1), nn.BatchNorm2d(cm), nn.ReLU(True),
                                      nn.Conv2d(cm, co, 3, padding=1), nn.BatchNorm2d(co), nn.ReLU(True))

        def forward(self, x):
            return self.conv(x)

    class CRAFT(nn.Module):
        """clovaai/CRAFT (EasyOCR's detector): VGG16-BN slices, fc6/fc7 (dilated 3x3 + 1x1), U-Net of
        double convs with bilinear interpolate to the skip's size and concat, 4 head convs, output
        permute(0, 2, 3, 1) (region / affinity score) and the feature map."""

        def __init__(self):
            super().__init__()
            import torchvision
            f = torchvision.models.vgg16_bn(weights=None).features
            self.s1, self.s2, self.s3, self.s4 = f[:12], f[12:19], f[19:29], f[29:39]
            self.s5 = nn.Sequential(nn.MaxPool2d(3, 1, 1), nn.Conv2d(512, 1024, 3, padding=6, dilation=6),
                                    nn.Conv2d(1024, 1024, 1))
            self.up1, self.up2 = DoubleConv(1024, 512, 256), DoubleConv(512, 256, 128)
            self.up3, self.up4 = DoubleConv(256, 128, 64), DoubleConv(128, 64, 32)
            self.cls = nn.Sequential(nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(True), nn.Conv2d(32, 32, 3, padding=1),
                                     nn.ReLU(True), nn.Conv2d(32, 16, 3, padding=1), nn.ReLU(True),
                                     nn.Conv2d(16, 16, 1), nn.ReLU(True), nn.Conv2d(16, 2, 1))

        def forward(self, x):
            h1 = self.s1(x)
            h2 = self.s2(h1)
            h3 = self.s3(h2)
            h4 = self.s4(h3)
            h5 = self.s5(h4)
            y = self.up1(torch.cat([h5, h4], 1))
            y = F.interpolate(y, size=h3.shape[2:], mode="bilinear", align_corners=False)
            y = self.up2(torch.cat([y, h3], 1))
            y = F.interpolate(y, size=h2.shape[2:], mode="bilinear", align_corners=False)
            y = self.up3(torch.cat([y, h2], 1))
            y = F.interpolate(y, size=h1.shape[2:], mode="bilinear", align_corners=False)
            feature = self.up4(torch.cat([y, h1], 1))
            return self.cls(feature).permute(0, 2, 3, 1), feature

    torch.manual_seed(0)
    img32 = torch.randn(1, 1, 32, 128)
    models = {
        "crnn_vgg": (CRNNVGG(), (img32,)),
        "crnn_resnet": (CRNNResNet(), (torch.randn(1, 1, 32, 100),)),
        "ppocr_rec": (PPOCRRec(), (torch.randn(1, 3, 48, 160),)),
        "svtr_tiny": (SVTRTiny(), (torch.randn(1, 3, 32, 128),)),
        "dbnet_r18": (DBNet(R18(), (64, 128, 256, 512)), (torch.randn(1, 3, 128, 128),)),
        "dbnet_mbv3": (DBNet(MBV3(), (16, 24, 48, 576), inner=96), (torch.randn(1, 3, 128, 128),)),
        "craft": (CRAFT(), (torch.randn(1, 3, 64, 64),)),
    }
    return models


def _hf_ocr_models(torch, nn):
    import timm
    from transformers import DeiTConfig, DeiTModel, TrOCRConfig, TrOCRForCausalLM

    class Enc(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = DeiTModel(DeiTConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                          intermediate_size=256, image_size=(64, 128), patch_size=16),
                               add_pooling_layer=False)

        def forward(self, x):
            return self.m(pixel_values=x).last_hidden_state

    class Dec(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = TrOCRForCausalLM(TrOCRConfig(vocab_size=500, d_model=128, decoder_layers=2, decoder_attention_heads=4,
                                                  decoder_ffn_dim=256, cross_attention_hidden_size=128,
                                                  max_position_embeddings=64, use_cache=False))

        def forward(self, ids, enc):
            return self.m(input_ids=ids, encoder_hidden_states=enc, use_cache=False).logits

    class PARSeqEnc(nn.Module):
        """PARSeq's encoder: timm VisionTransformer, img (32, 128), patch (4, 8), no class token."""

        def __init__(self):
            super().__init__()
            from timm.models.vision_transformer import VisionTransformer
            self.m = VisionTransformer(img_size=(32, 128), patch_size=(4, 8), embed_dim=192, depth=2, num_heads=3,
                                       mlp_ratio=4, num_classes=0, global_pool="", class_token=False)

        def forward(self, x):
            return self.m.forward_features(x)

    del timm
    torch.manual_seed(0)
    return {
        "trocr_enc": (Enc(), (torch.randn(1, 3, 64, 128),)),
        "trocr_dec": (Dec(), (torch.randint(3, 500, (1, 12)), torch.randn(1, 33, 128))),
        "parseq_enc": (PARSeqEnc(), (torch.randn(1, 3, 32, 128),)),
    }


def _conv_stft(torch, nn, n_fft, hop):
    """STFT as Conv1d with a fixed windowed Fourier basis (DTLN, Silero, DCCRN's ConvSTFT)."""
    k = np.arange(n_fft)
    win = np.hanning(n_fft + 1)[:-1]
    f = np.arange(n_fft // 2 + 1)[:, None]
    basis = np.concatenate([np.cos(2 * np.pi * f * k / n_fft), -np.sin(2 * np.pi * f * k / n_fft)]) * win
    conv = nn.Conv1d(1, basis.shape[0], n_fft, hop, bias=False)
    conv.weight.data = torch.tensor(basis[:, None, :], dtype=torch.float32)
    conv.weight.requires_grad_(False)
    return conv


def _audio_models(torch, nn, F):  # noqa: C901 - one place for the audio family
    class DeepSpeech2(nn.Module):
        """SeanNaren/deepspeech.pytorch: 2 Conv2d (41x11, 21x11) + BN + Hardtanh(0, 20), view to
        (T, N, C*F), BiGRU layers whose directions are summed (view(T, N, 2, -1).sum(2)), sequence-wise
        BatchNorm1d, FC, softmax."""

        def __init__(self, nfreq=41, h=96, ncls=29):
            super().__init__()
            self.conv = nn.Sequential(nn.Conv2d(1, 16, (41, 11), (2, 2), (20, 5)), nn.BatchNorm2d(16), nn.Hardtanh(0, 20, True),
                                      nn.Conv2d(16, 16, (21, 11), (2, 1), (10, 5)), nn.BatchNorm2d(16), nn.Hardtanh(0, 20, True))
            f = ((nfreq + 1) // 2 + 1) // 2
            self.rnns = nn.ModuleList([nn.GRU(16 * f if i == 0 else h, h, bidirectional=True) for i in range(3)])
            self.bns = nn.ModuleList([nn.BatchNorm1d(h) for _ in range(2)])
            self.fc = nn.Sequential(nn.BatchNorm1d(h), nn.Linear(h, ncls, bias=False))

        def forward(self, x):
            x = self.conv(x)
            n, c, f, t = x.shape
            x = x.view(n, c * f, t).transpose(1, 2).transpose(0, 1).contiguous()   # T, N, H
            for i, rnn in enumerate(self.rnns):
                if i:
                    tt, nn_ = x.shape[:2]
                    x = self.bns[i - 1](x.view(tt * nn_, -1)).view(tt, nn_, -1)
                x, _ = rnn(x)
                x = x.view(x.size(0), x.size(1), 2, -1).sum(2)
            tt, nn_ = x.shape[:2]
            x = self.fc(x.view(tt * nn_, -1)).view(tt, nn_, -1).transpose(0, 1)
            return F.softmax(x, dim=-1)

    class RNNTEncoder(nn.Module):
        """torchaudio Emformer-less RNN-T / ESPnet-style LSTM transducer encoder: Linear in, 2 LSTM
        layers, time reduction (stack 2 frames by reshape), 2 LSTM layers, LayerNorm, Linear out."""

        def __init__(self, nin=80, h=128, out=64):
            super().__init__()
            self.inp = nn.Linear(nin, h)
            self.l1 = nn.LSTM(h, h, 2, batch_first=True)
            self.l2 = nn.LSTM(2 * h, h, 2, batch_first=True)
            self.norm, self.out = nn.LayerNorm(h), nn.Linear(h, out)

        def forward(self, x):
            x, _ = self.l1(self.inp(x))
            b, t, c = x.shape
            x = x.reshape(b, t // 2, 2 * c)
            x, _ = self.l2(x)
            return self.out(self.norm(x))

    class CRN(nn.Module):
        """Tan & Wang's CRN: 5 Conv2d (2x3, stride (1, 2)) + BN + ELU, reshape to (B, T, C*F), 2 LSTM,
        reshape back, 5 ConvTranspose2d decoders on concat skips, Softplus mask."""

        def __init__(self, nf=161, chans=(8, 16, 32, 32, 64)):
            super().__init__()
            self.enc, self.dec = nn.ModuleList(), nn.ModuleList()
            ci, fs = 1, [nf]
            for c in chans:
                self.enc.append(nn.Sequential(nn.Conv2d(ci, c, (2, 3), (1, 2)), nn.BatchNorm2d(c), nn.ELU()))
                ci = c
                fs.append((fs[-1] - 3) // 2 + 1)
            self.f = fs[-1]
            self.lstm = nn.LSTM(chans[-1] * self.f, chans[-1] * self.f, 2, batch_first=True)
            outs = list(chans[-2::-1]) + [1]
            for i, c in enumerate(outs):
                op = (0, 1) if (fs[-2 - i] - 3) % 2 else (0, 0)
                last = i == len(outs) - 1
                self.dec.append(nn.Sequential(nn.ConvTranspose2d(2 * ci, c, (2, 3), (1, 2), output_padding=op),
                                              *([] if last else [nn.BatchNorm2d(c), nn.ELU()])))
                ci = c
            self.act = nn.Softplus()

        def forward(self, x):                     # [B, 1, T, F]
            skips = []
            for e in self.enc:
                x = F.pad(x, (0, 0, 1, 0))        # causal in time
                x = e(x)
                skips.append(x)
            b, c, t, f = x.shape
            y, _ = self.lstm(x.permute(0, 2, 1, 3).reshape(b, t, c * f))
            x = y.reshape(b, t, c, f).permute(0, 2, 1, 3)
            for d, s in zip(self.dec, skips[::-1]):
                x = d(torch.cat([x, s], 1))[:, :, :-1]
            return self.act(x)

    class DCCRN(nn.Module):
        """DCCRN-CL-style: ConvSTFT (Conv1d), real / imag stacked as channels, complex Conv2d encoder
        (two real convs: Wr*r - Wi*i, Wr*i + Wi*r on split channels), complex LSTM (two LSTMs), complex
        ConvTranspose2d decoder with skip concats, complex ratio mask, ConviSTFT (ConvTranspose1d)."""

        def __init__(self, n_fft=128, hop=32, chans=(16, 32, 32), h=64):
            super().__init__()
            self.stft = _conv_stft(torch, nn, n_fft, hop)
            self.f = n_fft // 2 + 1
            self.enc_r, self.enc_i, self.dec_r, self.dec_i = (nn.ModuleList() for _ in range(4))
            ci, fs = 1, [self.f]
            for c in chans:
                self.enc_r.append(nn.Conv2d(ci, c, (5, 2), (2, 1), (2, 0)))
                self.enc_i.append(nn.Conv2d(ci, c, (5, 2), (2, 1), (2, 0)))
                fs.append((fs[-1] + 4 - 5) // 2 + 1)
                ci = c
            self.feat = chans[-1] * fs[-1]
            self.lr, self.li = nn.LSTM(self.feat, h, batch_first=True), nn.LSTM(self.feat, h, batch_first=True)
            self.pr, self.pi = nn.Linear(h, self.feat), nn.Linear(h, self.feat)
            outs = list(chans[-2::-1]) + [1]
            for i, c in enumerate(outs):
                op = (1 - (fs[-2 - i] + 4 - 5) % 2, 0) if False else (0, 0)
                self.dec_r.append(nn.ConvTranspose2d(2 * ci, c, (5, 2), (2, 1), (2, 0), output_padding=op))
                self.dec_i.append(nn.ConvTranspose2d(2 * ci, c, (5, 2), (2, 1), (2, 0), output_padding=op))
                ci = c
            self.fs = fs
            basis = self.stft.weight.data[:, 0, :] / (n_fft / hop / 2)
            self.istft = nn.ConvTranspose1d(basis.shape[0], 1, n_fft, hop, bias=False)
            self.istft.weight.data = basis[:, None, :].clone()

        def forward(self, wav):                   # [B, 1, S]
            spec = self.stft(wav)                 # [B, 2F, T]
            r, i = spec[:, :self.f], spec[:, self.f:]
            x = torch.stack([r, i], 1)            # [B, 2, F, T]
            xr, xi = x[:, :1], x[:, 1:]
            skips = []
            for er, ei in zip(self.enc_r, self.enc_i):
                xr, xi = F.prelu(er(xr) - ei(xi), torch.tensor([0.2])), F.prelu(er(xi) + ei(xr), torch.tensor([0.2]))
                xr, xi = F.pad(xr, (0, 1)), F.pad(xi, (0, 1))
                xr, xi = xr[..., 1:], xi[..., 1:]
                skips.append((xr, xi))
            b, c, f, t = xr.shape
            fr, fi = xr.permute(0, 3, 1, 2).reshape(b, t, c * f), xi.permute(0, 3, 1, 2).reshape(b, t, c * f)
            rr, _ = self.lr(fr)
            ii, _ = self.li(fi)
            ri, _ = self.li(fr)
            ir, _ = self.lr(fi)
            yr, yi = self.pr(rr - ii), self.pi(ri + ir)
            xr, xi = yr.reshape(b, t, c, f).permute(0, 2, 3, 1), yi.reshape(b, t, c, f).permute(0, 2, 3, 1)
            for n, (dr, di) in enumerate(zip(self.dec_r, self.dec_i)):
                sr, si = skips[-1 - n]
                ar, ai = torch.cat([xr, sr], 1), torch.cat([xi, si], 1)
                xr, xi = dr(ar) - di(ai), dr(ai) + di(ar)
                xr, xi = xr[:, :, :self.fs[-2 - n]], xi[:, :, :self.fs[-2 - n]]
            mr, mi = torch.tanh(xr[:, 0]), torch.tanh(xi[:, 0])
            er, ei = r * mr - i * mi, r * mi + i * mr
            return self.istft(torch.cat([er, ei], 1))

    class DTLN(nn.Module):
        """DTLN (breizhn/DTLN) streaming block, states as graph inputs / outputs: magnitude of a Conv1d
        STFT frame, 2 LSTMs + Dense + sigmoid mask, masked frame back by a Conv1d iDFT basis; second
        stage: Conv1d encoder, instant layer norm, 2 LSTMs + mask, Conv1d decoder."""

        def __init__(self, n=256, h=64, enc=128):
            super().__init__()
            self.stft = _conv_stft(torch, nn, n, n)
            self.fb = n // 2 + 1
            self.l1, self.l2 = nn.LSTM(self.fb, h, batch_first=True), nn.LSTM(h, h, batch_first=True)
            self.d1 = nn.Linear(h, self.fb)
            self.idft = nn.Conv1d(2 * self.fb, n, 1, bias=False)
            self.enc = nn.Conv1d(n, enc, 1, bias=False)
            self.ln = nn.LayerNorm(enc, eps=1e-7)
            self.l3, self.l4 = nn.LSTM(enc, h, batch_first=True), nn.LSTM(h, h, batch_first=True)
            self.d2 = nn.Linear(h, enc)
            self.dec = nn.Conv1d(enc, n, 1, bias=False)

        def forward(self, frame, states):         # [1, 1, n], [4, 2, 1, h] (layer, h/c)
            s = self.stft(frame)                  # [1, 2*fb, 1]
            re, im = s[:, :self.fb], s[:, self.fb:]
            mag = torch.sqrt(re * re + im * im + 1e-7).transpose(1, 2)
            outs = []
            y, (h1, c1) = self.l1(mag, (states[0, :1], states[0, 1:]))
            y, (h2, c2) = self.l2(y, (states[1, :1], states[1, 1:]))
            m = torch.sigmoid(self.d1(y)).transpose(1, 2)
            est = self.idft(torch.cat([re * m, im * m], 1))          # [1, n, 1]
            e = self.enc(est).transpose(1, 2)
            y, (h3, c3) = self.l3(self.ln(e), (states[2, :1], states[2, 1:]))
            y, (h4, c4) = self.l4(y, (states[3, :1], states[3, 1:]))
            m2 = torch.sigmoid(self.d2(y))
            out = self.dec((e * m2).transpose(1, 2))
            for h_, c_ in ((h1, c1), (h2, c2), (h3, c3), (h4, c4)):
                outs.append(torch.cat([h_, c_], 0))
            return out, torch.stack(outs, 0)

    class SileroVAD(nn.Module):
        """Silero VAD v5-style: context + chunk, reflect pad, conv STFT (Conv1d, stride 128), magnitude,
        4 Conv1d + ReLU encoder blocks, LSTMCell with the state [2, 1, 128] as input and output,
        ReLU, Conv1d decoder, sigmoid, mean."""

        def __init__(self, h=128):
            super().__init__()
            self.stft = _conv_stft(torch, nn, 256, 128)
            chans = [(129, 128, 1), (128, 64, 2), (64, 64, 2), (64, 128, 1)]
            self.enc = nn.Sequential(*[nn.Sequential(nn.Conv1d(a, b, 3, s, 1), nn.ReLU()) for a, b, s in chans])
            self.cell = nn.LSTMCell(128, h)
            self.dec = nn.Sequential(nn.Dropout(0.1), nn.ReLU(), nn.Conv1d(h, 1, 1), nn.Sigmoid())

        def forward(self, x, state):             # [1, 576] (64 context + 512), [2, 1, 128]
            x = F.pad(x.unsqueeze(1), (0, 64), mode="reflect")
            s = self.stft(x)
            re, im = s[:, :129], s[:, 129:]
            mag = torch.sqrt(re * re + im * im)
            y = self.enc(mag)                     # [1, 128, 1]
            h, c = self.cell(y.squeeze(-1), (state[0], state[1]))
            out = self.dec(h.unsqueeze(-1)).squeeze(1).mean(dim=1, keepdim=True)
            return out, torch.stack([h, c])

    class DSCNN(nn.Module):
        """ARM ML-KWS DS-CNN (S): Conv2d 10x4 stride 2 + BN + ReLU, 4 depthwise-separable blocks,
        AvgPool over the map, FC."""

        def __init__(self, c=64, ncls=12):
            super().__init__()
            layers = [nn.Conv2d(1, c, (10, 4), (2, 2), (5, 1)), nn.BatchNorm2d(c), nn.ReLU()]
            for _ in range(4):
                layers += [nn.Conv2d(c, c, 3, 1, 1, groups=c), nn.BatchNorm2d(c), nn.ReLU(),
                           nn.Conv2d(c, c, 1), nn.BatchNorm2d(c), nn.ReLU()]
            self.f = nn.Sequential(*layers)
            self.fc = nn.Linear(c, ncls)

        def forward(self, x):                     # [1, 1, 49, 10]
            x = self.f(x)
            x = F.avg_pool2d(x, x.shape[2:])
            return self.fc(torch.flatten(x, 1))

    class GRUKWS(nn.Module):
        """GRU keyword spotter (ML-KWS GRU / Hello Edge): 2-layer GRU over MFCC frames, last step, FC."""

        def __init__(self, nin=10, h=64, ncls=12):
            super().__init__()
            self.gru = nn.GRU(nin, h, 2, batch_first=True)
            self.fc = nn.Linear(h, ncls)

        def forward(self, x):                     # [1, 49, 10]
            y, _ = self.gru(x)
            return self.fc(y[:, -1])

    class LSTMState(nn.Module):
        """An LSTM with explicit initial state inputs and its final states as outputs (stateful chunking)."""

        def __init__(self, nin=40, h=64):
            super().__init__()
            self.lstm = nn.LSTM(nin, h, 2)
            self.fc = nn.Linear(h, 16)

        def forward(self, x, h0, c0):
            y, (h, c) = self.lstm(x, (h0, c0))
            return self.fc(y), h, c

    class LSTMSeqLens(nn.Module):
        """pack_padded_sequence -> LSTM -> pad_packed_sequence: ONNX LSTM with sequence_lens."""

        def __init__(self, nin=40, h=64):
            super().__init__()
            self.lstm = nn.LSTM(nin, h, bidirectional=True)
            self.fc = nn.Linear(2 * h, 16)

        def forward(self, x, lens):
            p = nn.utils.rnn.pack_padded_sequence(x, lens, enforce_sorted=False)
            y, _ = self.lstm(p)
            y, _ = nn.utils.rnn.pad_packed_sequence(y, total_length=x.shape[0])
            return self.fc(y)

    class BiLSTMStream(nn.Module):
        """batch_first bidirectional LSTM with initial state inputs and the final states as outputs."""

        def __init__(self, nin=40, h=48):
            super().__init__()
            self.lstm = nn.LSTM(nin, h, 1, batch_first=True, bidirectional=True)
            self.fc = nn.Linear(2 * h, 20)

        def forward(self, x, h0, c0):
            y, (h, c) = self.lstm(x, (h0, c0))
            return F.log_softmax(self.fc(y), -1), h, c

    torch.manual_seed(0)
    return {
        "deepspeech2": (DeepSpeech2(), (torch.randn(1, 1, 41, 64),)),
        "rnnt_enc": (RNNTEncoder(), (torch.randn(1, 32, 80),)),
        "crn": (CRN(), (torch.randn(1, 1, 16, 161),)),
        "dccrn": (DCCRN(), (torch.randn(1, 1, 1024),)),
        "dtln": (DTLN(), (torch.randn(1, 1, 256), torch.randn(4, 2, 1, 64) * 0.1)),
        "silero_vad": (SileroVAD(), (torch.randn(1, 576), torch.randn(2, 1, 128) * 0.1)),
        "ds_cnn": (DSCNN(), (torch.randn(1, 1, 49, 10),)),
        "gru_kws": (GRUKWS(), (torch.randn(1, 49, 10),)),
        "lstm_state": (LSTMState(), (torch.randn(20, 1, 40), torch.randn(2, 1, 64) * 0.1, torch.randn(2, 1, 64) * 0.1)),
        "lstm_seqlens": (LSTMSeqLens(), (torch.randn(20, 2, 40), torch.tensor([20, 13], dtype=torch.int64))),
        "bilstm_stream": (BiLSTMStream(), (torch.randn(1, 16, 40), torch.randn(2, 1, 48) * 0.1, torch.randn(2, 1, 48) * 0.1)),
    }


def _models():
    import torch
    from torch import nn
    from torch.nn import functional as F
    out = {}
    out.update(_ocr_models(torch, nn, F))
    out.update(_hf_ocr_models(torch, nn))
    out.update(_audio_models(torch, nn, F))
    return out


def export(out: str, names) -> int:
    import torch
    os.makedirs(out, exist_ok=True)
    for name, (m, args) in _models().items():
        if names and name not in names:
            continue
        m = m.eval()
        for dynamo in (False, True):
            path = os.path.join(out, f"{name}_{'dynamo' if dynamo else 'ts'}.onnx")
            try:
                with torch.no_grad():
                    torch.onnx.export(m, args, path, opset_version=18 if dynamo else 17, dynamo=dynamo)
                print("exported", path, flush=True)
            except Exception as exc:   # noqa: BLE001 - a survey: report and go on
                print("FAILED", path, type(exc).__name__, str(exc)[:300], flush=True)
        np.savez(os.path.join(out, f"{name}_feeds.npz"), *[a.numpy() for a in args])
    return 0


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["export", "survey"])
    ap.add_argument("folder")
    ap.add_argument("names", nargs="*")
    ap.add_argument("--quant", action="store_true", help="survey: also QDQ S8 / U8 and dynamic int8 (+ calibration)")
    ap.add_argument("--clean", action="store_true",
                    help="survey: delete each export's converted / quantized files once its lines are printed")
    a = ap.parse_intermixed_args(argv)
    if a.command == "export":
        return export(a.folder, a.names)
    if not a.clean:
        return common.survey(a.folder, a.names, a.quant)
    import glob
    import shutil
    for src in sorted(glob.glob(os.path.join(a.folder, "*.onnx"))):
        name = os.path.basename(src)[:-5]
        if a.names and not any(n in name for n in a.names):
            continue
        common.survey(a.folder, [name], a.quant)
        shutil.rmtree(os.path.join(a.folder, "survey"), ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
