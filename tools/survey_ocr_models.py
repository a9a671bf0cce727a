"""OCR architectures as real PyTorch projects write them (re-implementations, random init) and
transformers / timm OCR encoders / decoders from configs: the models of
tools/survey_ocr_audio_exports.py (docs/surveys/ocr-audio.md). Needs torch, torchvision, timm and
transformers (not project dependencies)."""
from __future__ import annotations


def ocr_models(torch, nn, F):  # noqa: C901 - one place for the OCR family
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


def hf_ocr_models(torch, nn):
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
