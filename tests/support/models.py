"""Small models for the tests: an untrained multilingual model of a fixed seed."""

from __future__ import annotations

import torch

from model.nmt import MultilingualNMT

LANGS = ["en", "fr", "es", "ru", "ar", "zh"]


def small_model(**kwargs) -> MultilingualNMT:
    torch.manual_seed(0)
    args = dict(languages=LANGS, vocab_size=2000, embed_dim=16, encoder_hidden=24, decoder_hidden=24, dropout=0.0)
    return MultilingualNMT(**{**args, **kwargs})
