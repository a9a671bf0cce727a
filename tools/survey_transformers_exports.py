"""Survey of more Hugging Face transformers encoders (beyond tools/survey_torch_exports.py's BERT /
DistilBERT / RoBERTa / GPT-2 / Whisper / wav2vec2 / ViT): text (ALBERT, ELECTRA, DeBERTa-v2,
MobileBERT, XLM-RoBERTa, MPNet, T5 / BART encoders, Llama / Qwen2 decoders without KV cache),
speech (HuBERT, WavLM, wav2vec2-Conformer, SEW, SEW-D, Speech2Text, AST) and vision (Swin,
SegFormer, MobileViT, DeiT, BEiT, ConvNeXt-V2, DINOv2, CLIP text / vision). Random init from small
configs (hidden 64-128, 2-4 layers; no download).

Needs torch and transformers (not project dependencies; never run by the tests):

    /tmp/venv/bin/python tools/survey_transformers_exports.py export OUT_DIR [NAME ...]
    python tools/survey_transformers_exports.py survey OUT_DIR [NAME ...] [--quant]

``survey`` is tools/survey_torch_exports.py's (docs/surveys/transformers.md).
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import survey_torch_exports as base  # noqa: E402

T = base.T


def _text(m, ids, am):
    return m(input_ids=ids, attention_mask=am)


def _ids_only(m, ids):
    return m(input_ids=ids)


def _values(m, x):
    return m(input_values=x)


def _features(m, x):
    return m(input_features=x)


def _pixels(m, x):
    return m(pixel_values=x)


def _models():
    import torch
    import transformers as tr
    torch.manual_seed(0)
    ids = torch.randint(5, 1000, (1, T))
    am = torch.ones(1, T, dtype=torch.long)
    am[:, -6:] = 0
    text = dict(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=256)
    wav = (torch.randn(1, 4000),)
    img = (torch.randn(1, 3, 64, 64),)
    conv = dict(conv_dim=(64, 64, 64), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
                num_conv_pos_embedding_groups=4, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=256)
    dec = dict(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
               intermediate_size=256, max_position_embeddings=128, use_cache=False)
    m = {
        # text
        "albert": (tr.AlbertModel(tr.AlbertConfig(embedding_size=64, **text)), _text, (ids, am)),
        "electra": (tr.ElectraModel(tr.ElectraConfig(embedding_size=64, **text)), _text, (ids, am)),
        "deberta_v2": (tr.DebertaV2Model(tr.DebertaV2Config(max_relative_positions=-1, position_buckets=16,
                                                             relative_attention=True, pos_att_type=["p2c", "c2p"],
                                                             position_biased_input=False, norm_rel_ebd="layer_norm",
                                                             share_att_key=True, **text)), _text, (ids, am)),
        "mobilebert": (tr.MobileBertModel(tr.MobileBertConfig(vocab_size=1000, hidden_size=128, embedding_size=64,
                                                              num_hidden_layers=2, num_attention_heads=4,
                                                              intermediate_size=128, intra_bottleneck_size=64,
                                                              true_hidden_size=64, num_feedforward_networks=2)),
                       _text, (ids, am)),
        "xlm_roberta": (tr.XLMRobertaModel(tr.XLMRobertaConfig(**text)), _text, (ids, am)),
        "mpnet": (tr.MPNetModel(tr.MPNetConfig(**text)), _text, (ids, am)),
        "t5_encoder": (tr.T5EncoderModel(tr.T5Config(vocab_size=1000, d_model=128, d_kv=32, d_ff=256, num_layers=2,
                                                     num_heads=4, feed_forward_proj="gated-gelu")), _text, (ids, am)),
        "bart_encoder": (tr.BartModel(tr.BartConfig(vocab_size=1000, d_model=128, encoder_layers=2, decoder_layers=1,
                                                    encoder_attention_heads=4, decoder_attention_heads=4,
                                                    encoder_ffn_dim=256, decoder_ffn_dim=256,
                                                    max_position_embeddings=128)).get_encoder(), _text, (ids, am)),
        "llama": (tr.LlamaModel(tr.LlamaConfig(**dec)), _ids_only, (ids,)),
        "qwen2": (tr.Qwen2Model(tr.Qwen2Config(**dec)), _ids_only, (ids,)),
        # speech
        "hubert": (tr.HubertModel(tr.HubertConfig(**conv)), _values, wav),
        "wavlm": (tr.WavLMModel(tr.WavLMConfig(num_buckets=64, max_bucket_distance=100, **conv)), _values, wav),
        "w2v2_conformer": (tr.Wav2Vec2ConformerModel(tr.Wav2Vec2ConformerConfig(position_embeddings_type="rotary",
                                                                                conv_depthwise_kernel_size=15, **conv)),
                           _values, wav),
        "sew": (tr.SEWModel(tr.SEWConfig(squeeze_factor=2, **dict(conv, conv_dim=(64,) * 3))), _values, wav),
        "sew_d": (tr.SEWDModel(tr.SEWDConfig(squeeze_factor=2, position_buckets=16, max_position_embeddings=128,
                                             **conv)), _values, wav),
        "speech2text": (tr.Speech2TextModel(tr.Speech2TextConfig(vocab_size=1000, d_model=128, encoder_layers=2,
                                                                 decoder_layers=1, encoder_attention_heads=4,
                                                                 decoder_attention_heads=4, encoder_ffn_dim=256,
                                                                 decoder_ffn_dim=256, input_feat_per_channel=80,
                                                                 conv_channels=128)).get_encoder(),
                        _features, (torch.randn(1, 200, 80),)),
        "ast": (tr.ASTModel(tr.ASTConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                         intermediate_size=256, max_length=128, num_mel_bins=64)),
                _values, (torch.randn(1, 128, 64),)),
        # vision
        "swin": (tr.SwinModel(tr.SwinConfig(image_size=64, patch_size=4, embed_dim=32, depths=(2, 2), num_heads=(2, 4),
                                            window_size=4)), _pixels, img),
        "segformer": (tr.SegformerModel(tr.SegformerConfig(num_encoder_blocks=2, depths=(1, 1), sr_ratios=(4, 2),
                                                           hidden_sizes=(32, 64), num_attention_heads=(1, 2),
                                                           patch_sizes=(7, 3), strides=(4, 2), mlp_ratios=(4, 4))),
                      _pixels, img),
        "mobilevit": (tr.MobileViTModel(tr.MobileViTConfig(image_size=64, hidden_sizes=(64, 80, 96),
                                                           neck_hidden_sizes=(16, 24, 48, 64, 80, 96, 384))),
                      _pixels, img),
        "deit": (tr.DeiTModel(tr.DeiTConfig(image_size=64, patch_size=16, hidden_size=128, num_hidden_layers=2,
                                            num_attention_heads=4, intermediate_size=256)), _pixels, img),
        "beit": (tr.BeitModel(tr.BeitConfig(image_size=64, patch_size=16, hidden_size=128, num_hidden_layers=2,
                                            num_attention_heads=4, intermediate_size=256,
                                            use_relative_position_bias=True)), _pixels, img),
        "convnextv2": (tr.ConvNextV2Model(tr.ConvNextV2Config(hidden_sizes=(32, 64, 128, 256), depths=(1, 1, 2, 1),
                                                              image_size=64)), _pixels, img),
        "dinov2": (tr.Dinov2Model(tr.Dinov2Config(image_size=64, patch_size=16, hidden_size=128, num_hidden_layers=2,
                                                  num_attention_heads=4)), _pixels, img),
        "clip_text": (tr.CLIPTextModel(tr.CLIPTextConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2,
                                                         num_attention_heads=4, intermediate_size=256,
                                                         max_position_embeddings=64, bos_token_id=1, eos_token_id=2)), _text, (ids, am)),
        "clip_vision": (tr.CLIPVisionModel(tr.CLIPVisionConfig(image_size=64, patch_size=16, hidden_size=128,
                                                               num_hidden_layers=2, num_attention_heads=4,
                                                               intermediate_size=256)), _pixels, img),
    }
    for mod in m["mobilevit"][0].modules():   # HF's init (std 0.02 convs, some zero norm scales) gives an
        if isinstance(mod, torch.nn.BatchNorm2d):   # output of ~1e-4 or 0: a realistic scale instead
            torch.nn.init.uniform_(mod.weight, 0.5, 1.5)
        elif isinstance(mod, torch.nn.Conv2d):
            torch.nn.init.kaiming_normal_(mod.weight)
    return m


def main(argv=None) -> int:
    return base.run(base.parser(__doc__), argv, {"export": lambda a: base.export(a.folder, a.names, _models())})


if __name__ == "__main__":
    sys.exit(main())
