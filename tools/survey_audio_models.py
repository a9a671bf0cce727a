"""Recurrent / streaming audio architectures as real PyTorch projects write them (re-implementations,
random init): the models of tools/survey_ocr_audio_exports.py (docs/surveys/ocr-audio.md). Needs
torch (not a project dependency)."""
from __future__ import annotations

import numpy as np


def conv_stft(torch, nn, n_fft, hop):
    """STFT as Conv1d with a fixed windowed Fourier basis (DTLN, Silero, DCCRN's ConvSTFT)."""
    k = np.arange(n_fft)
    win = np.hanning(n_fft + 1)[:-1]
    f = np.arange(n_fft // 2 + 1)[:, None]
    basis = np.concatenate([np.cos(2 * np.pi * f * k / n_fft), -np.sin(2 * np.pi * f * k / n_fft)]) * win
    conv = nn.Conv1d(1, basis.shape[0], n_fft, hop, bias=False)
    conv.weight.data = torch.tensor(basis[:, None, :], dtype=torch.float32)
    conv.weight.requires_grad_(False)
    return conv


def audio_models(torch, nn, F):  # noqa: C901 - one place for the audio family
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
            self.stft = conv_stft(torch, nn, n_fft, hop)
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
            self.stft = conv_stft(torch, nn, n, n)
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
            self.stft = conv_stft(torch, nn, 256, 128)
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
