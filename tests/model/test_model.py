"""The model on real Bible token ids: shapes, padding, gradient placement per path, overfitting."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from model.batching import ParallelCorpus, pad
from model.inference import embed
from model.model_file import ModelFileError, load_legacy_model, load_meta, load_model, save_model
from model.nmt import MultilingualNMT
from tests.support.models import LANGS, small_model


@pytest.fixture(scope="module")
def corpus(small_dataset) -> ParallelCorpus:
    return ParallelCorpus.read(small_dataset.data_dir, "train", LANGS)


def rows_with(corpus: ParallelCorpus, langs: list[str], n: int) -> np.ndarray:
    present = np.all([corpus.lengths[lang] > 0 for lang in langs], axis=0)
    return np.flatnonzero(present)[:n]


@pytest.mark.parametrize("pooling,dim", [("max", 48), ("last", 24), ("mean", 16)])
def test_encode_shape_and_no_padding_leak(corpus, pooling, dim):
    model = small_model(pooling=pooling).eval()
    rows = rows_with(corpus, ["fr"], 6)
    seqs = [corpus.ids("fr", r) for r in rows]
    assert len({len(s) for s in seqs}) > 1, "the batch must need padding"
    ids, lengths = pad(seqs, eos=True)
    with torch.no_grad():
        batch = model.encode(ids, lengths, "fr")
        assert batch.shape == (6, dim)
        for i, seq in enumerate(seqs):
            alone = model.encode(*pad([seq], eos=True), "fr")
            torch.testing.assert_close(batch[i], alone[0], rtol=1e-5, atol=1e-6)
        # padding with other token ids instead of PAD changes nothing either
        noisy = ids.clone()
        noisy[ids == 0] = 7
        torch.testing.assert_close(model.encode(noisy, lengths, "fr"), batch)


def test_forward_losses_and_shared_modules(corpus):
    rows = rows_with(corpus, ["fr", "en", "es"], 5)
    sources, targets = corpus.batch((("fr",), ("en", "es")), rows)
    out = small_model()(sources, targets)
    assert set(out.nll) == {"en", "es"} and out.ranking is None
    # tokens = target ids + one EOS per sentence
    assert int(out.tokens["en"]) == int(corpus.lengths["en"][rows].sum()) + len(rows)
    assert out.loss.item() == pytest.approx(np.log(2000), rel=0.1)  # untrained: near uniform
    shared = small_model(shared_encoder=True, shared_decoder=True)
    assert list(shared.encoders) == ["shared"] and list(shared.decoders) == ["shared"]
    assert shared(sources, targets).loss.isfinite()


def grads(model: MultilingualNMT) -> set[str]:
    """Top-level modules (encoders.fr, decoders.en) holding a non-zero gradient."""
    found = set()
    for name, p in model.named_parameters():
        if p.grad is not None and p.grad.abs().sum() > 0:
            found.add(".".join(name.split(".")[:2]))
    return found


@pytest.mark.parametrize(
    "signature,ranking,expected",
    [
        ((("fr",), ("en",)), 0.0, {"encoders.fr", "decoders.en"}),  # 1:1
        ((("fr",), ("en",)), 1.0, {"encoders.fr", "decoders.en", "encoders.en"}),  # + ranking
        ((("fr",), ("en", "es", "ru")), 0.0, {"encoders.fr", "decoders.en", "decoders.es", "decoders.ru"}),  # 1:N
        ((("es", "fr"), ("en",)), 0.0, {"encoders.es", "encoders.fr", "decoders.en"}),  # M:1
        ((("es", "fr"), ("ar", "zh")), 0.0, {"encoders.es", "encoders.fr", "decoders.ar", "decoders.zh"}),  # M:N
        ((("fr",), ("en", "ru")), -1.0, {"encoders.fr", "encoders.en", "encoders.ru"}),  # ranking only
    ],
)
def test_each_path_puts_gradients_exactly_where_it_should(corpus, signature, ranking, expected):
    model = small_model(nmt_weight=0.0 if ranking < 0 else 1.0)
    ranking = abs(ranking)
    rows = rows_with(corpus, list(signature[0] + signature[1]), 4)
    sources, targets = corpus.batch(signature, rows)
    model(sources, targets, ranking_weight=ranking).loss.backward()
    assert grads(model) == expected


@pytest.mark.parametrize(
    "targets, expected",
    [
        (("en", "es", "ru"), {"encoders.fr", "encoders.en", "encoders.es", "encoders.ru", "decoders.en"}),
        (("es", "ru"), {"encoders.fr", "encoders.es", "encoders.ru"}),  # nothing decoded: the ranking alone
    ],
)
def test_nmt_targets_decode_only_their_languages_and_every_target_is_still_ranked(corpus, targets, expected):
    model = small_model(shared_encoder=False, nmt_targets=["en"])
    rows = rows_with(corpus, ["fr", *targets], 4)
    sources, batch_targets = corpus.batch((("fr",), targets), rows)
    out = model(sources, batch_targets, ranking_weight=1.0)
    assert set(out.nll) == ({"en"} & set(targets)) and out.ranking is not None
    out.loss.backward()
    assert grads(model) == expected
    assert model.args.nmt_targets == ["en"]


def test_overfits_a_handful_of_real_pairs(corpus):
    rows = rows_with(corpus, ["fr", "en"], 8)
    sources, targets = corpus.batch((("fr",), ("en",)), rows)
    model = small_model(encoder_hidden=64, decoder_hidden=64, embed_dim=32)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    first = None
    for _ in range(150):
        out = model(sources, targets, ranking_weight=1.0)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        first = first or float(out.nll["en"].detach() / out.tokens["en"])
    final = float(out.nll["en"].detach() / out.tokens["en"])
    assert first > 6.0 and final < 0.5, (first, final)
    fr = embed(model, [corpus.ids("fr", r) for r in rows], "fr")
    en = embed(model, [corpus.ids("en", r) for r in rows], "en")
    sims = (fr / np.linalg.norm(fr, axis=1, keepdims=True)) @ (en / np.linalg.norm(en, axis=1, keepdims=True)).T
    assert (sims.argmax(axis=1) == np.arange(8)).all()


def test_adaptive_softmax_and_token_order(corpus):
    model = small_model(output="adaptive", adaptive_cutoffs=[100, 500])
    counts = torch.from_numpy(corpus.token_counts(2000))
    model.set_token_order(counts)
    ranks = model.decoders["en"].token_class
    assert ranks[counts.argmax()] == 0 and sorted(ranks.tolist()) == list(range(2000))
    rows = rows_with(corpus, ["fr", "en"], 4)
    out = model(*corpus.batch((("fr",), ("en",)), rows))
    assert out.loss.item() == pytest.approx(np.log(2000), rel=0.15)
    with pytest.raises(ValueError, match="adaptive_cutoffs"):
        small_model(output="adaptive", adaptive_cutoffs=[500, 100])


def test_embed_keeps_input_order_and_save_load_round_trip(corpus, tmp_path):
    model = small_model()
    seqs = [corpus.ids("ru", r) for r in rows_with(corpus, ["ru"], 30)]
    emb = embed(model, seqs, "ru", max_tokens=200)  # several length-sorted batches
    with torch.no_grad():
        direct = model.eval().encode(*pad(seqs[:1], eos=True), "ru").numpy()
    np.testing.assert_allclose(emb[0], direct[0], rtol=1e-5, atol=1e-6)
    save_model(model, str(tmp_path / "m.safetensors"), step=3)
    loaded, meta = load_model(str(tmp_path / "m.safetensors"))
    assert meta == load_meta(str(tmp_path / "m.safetensors")) and meta.step == 3 and meta.dev_error is None
    np.testing.assert_allclose(embed(loaded, seqs, "ru"), emb, rtol=1e-5, atol=1e-6)
    # an older version's file (a torch pickle of plain values): converted through load_legacy_model only
    blob = {"args": model.args.model_dump(), "state_dict": model.state_dict(), "meta": {"step": 4}}
    torch.save(blob, str(tmp_path / "legacy.pt"))
    with pytest.raises(ModelFileError, match="not a safetensors file"):
        load_meta(str(tmp_path / "legacy.pt"))
    legacy, meta = load_legacy_model(str(tmp_path / "legacy.pt"))
    assert meta.step == 4
    np.testing.assert_allclose(embed(legacy, seqs, "ru"), emb, rtol=1e-5, atol=1e-6)


class _Payload:
    """Unpickling this object runs a shell command (what a hostile model.pt in a bucket could do)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


def test_a_pickle_that_would_run_code_is_refused_by_every_reader(tmp_path):
    """A model file or a legacy model.pt whose unpickling runs code: every reader refuses it, and the code
    never runs (the marker file it would create stays absent)."""
    marker = tmp_path / "ran"
    model = small_model()
    hostile = {"args": model.args.model_dump(), "state_dict": model.state_dict(), "meta": {"x": _Payload(marker)}}
    for name in ("model.safetensors", "legacy.pt"):
        torch.save(hostile, str(tmp_path / name))
    for read in (load_meta, load_model):
        with pytest.raises(ModelFileError):
            read(str(tmp_path / "model.safetensors"))
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        load_legacy_model(str(tmp_path / "legacy.pt"))
    assert not marker.exists()
    torch.load(str(tmp_path / "legacy.pt"), weights_only=False)  # the check can fail: unpickled, it runs
    assert marker.exists()


@pytest.mark.parametrize("pooling,layers", [("max", 1), ("max", 2), ("last", 2)])
def test_unpacked_lstm_equals_torchs_packed_lstm(corpus, pooling, layers):
    """The encoder runs its LSTM over the padded batch (3x faster on CPU than packing); it must give
    what torch's packed LSTM gives with the same weights, gradients included."""
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    model = small_model(pooling=pooling, encoder_layers=layers)
    encoder = model.encoders["fr"]
    ids, lengths = pad([corpus.ids("fr", r) for r in rows_with(corpus, ["fr"], 7)], eos=True)
    assert lengths.min() < lengths.max()
    ours = encoder(ids, lengths)
    packed, (h, _) = encoder.lstm(
        pack_padded_sequence(encoder.embed(ids), lengths, batch_first=True, enforce_sorted=False)
    )
    if pooling == "last":
        reference = h[-1]
    else:
        states, _ = pad_packed_sequence(packed, batch_first=True, padding_value=float("-inf"))
        reference = states.max(dim=1).values
    torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-6)
    weight = encoder.lstm.weight_hh_l0_reverse if pooling == "max" else encoder.lstm.weight_hh_l0
    ours_grad = torch.autograd.grad(ours.square().sum(), weight)[0]
    reference_grad = torch.autograd.grad(reference.square().sum(), weight)[0]
    torch.testing.assert_close(ours_grad, reference_grad, rtol=1e-4, atol=1e-6)


def test_multiway_ranking_loss_is_the_mean_over_ordered_pairs():
    model = small_model()
    torch.manual_seed(1)
    emb = torch.randn(3, 5, 8)
    pairwise = [model.ranking_loss(emb[p], emb[q]) for p in range(3) for q in range(3) if p < q]
    torch.testing.assert_close(model.multiway_ranking_loss(emb), torch.stack(pairwise).mean())
    # aligned, well-separated embeddings: the loss vanishes; shuffled: it does not
    aligned = torch.eye(5).repeat(3, 1, 1)
    assert model.multiway_ranking_loss(aligned) < 1e-3
    shuffled = aligned.clone()
    shuffled[1] = aligned[1, [1, 2, 3, 4, 0]]  # language 1 no longer aligned with 0 and 2
    assert model.multiway_ranking_loss(shuffled) > 1


def test_ranking_all_pairs_trains_every_language_of_the_batch_through_one_shared_encoder(corpus):
    rows = rows_with(corpus, ["fr", "en", "ru"], 4)
    sources, targets = corpus.batch((("fr",), ("en", "ru")), rows)
    calls = []
    for pairs in ("source", "all"):
        model = small_model(shared_encoder=True, nmt_weight=0.0, ranking_pairs=pairs)
        model.encoders["shared"].register_forward_hook(lambda m, args, out: calls.append(len(args[0])))
        out = model(sources, targets, ranking_weight=1.0)
        encoded = {lang: model.encode(*pair, lang) for lang, pair in {**sources, **targets}.items()}
        if pairs == "all":
            expected = model.multiway_ranking_loss(torch.stack([encoded[lang] for lang in ("fr", "en", "ru")]))
        else:
            expected = (
                model.ranking_loss(encoded["fr"], encoded["en"]) + model.ranking_loss(encoded["fr"], encoded["ru"])
            ) / 2
        torch.testing.assert_close(out.ranking, expected, rtol=1e-5, atol=1e-6)
    assert calls[0] == calls[4] == 12  # one encoder call over the 3 languages x 4 tuples
    with pytest.raises(ValueError, match="ranking_pairs"):
        small_model(ranking_pairs="every")


@pytest.mark.parametrize("teacher_dim", [48, 12])
def test_distillation_regresses_each_source_onto_its_own_and_the_pivots_teacher_rows_only(corpus, teacher_dim):
    """The masked mean squared error between the mapped source embeddings and the teacher's, per term (the
    source's own language, the pivot), averaged over the terms; rows without a teacher vector count nothing;
    a map only where the sizes differ (the student's is 48); it trains the encoder and the map. A target the
    batch carries the teacher's vectors of (`model.distill_languages: all`) is regressed too, a target it
    does not is not."""
    from model.model_file import embedding_size
    from model.nmt import PIVOT

    rows = rows_with(corpus, ["fr", "en", "ru"], 5)
    sources, targets = corpus.batch((("fr",), ("en", "ru")), rows)
    model = small_model(shared_encoder=True, nmt_weight=0.0, distill_dim=teacher_dim)
    assert embedding_size(model.args) == model.embedding_dim == 48
    assert (model.distill_map is None) == (teacher_dim == 48)
    torch.manual_seed(2)
    own, pivot = torch.randn(5, teacher_dim), torch.randn(5, teacher_dim)
    has_own, has_pivot = torch.tensor([True, True, False, True, False]), torch.ones(5, dtype=torch.bool)
    teacher = {"fr": (own, has_own), PIVOT: (pivot, has_pivot)}
    out = model(sources, targets, ranking_weight=1.0, teacher=teacher, distill_weight=0.5)

    def mapped_of(lang):
        embedding = model.encode(*(sources | targets)[lang], lang)
        return model.distill_map(embedding) if model.distill_map is not None else embedding

    mapped = mapped_of("fr")
    error = (mapped - own).pow(2).mean(-1)
    expected = (error[has_own].mean() + (mapped - pivot).pow(2).mean(-1).mean()) / 2  # no target's vectors
    torch.testing.assert_close(out.distill, expected, rtol=1e-5, atol=1e-6)
    ru = torch.randn(5, teacher_dim)
    both = model(sources, targets, ranking_weight=1.0, teacher={**teacher, "ru": (ru, has_pivot)}, distill_weight=0.5)
    mapped_ru = mapped_of("ru")
    terms = [error[has_own].mean(), (mapped - pivot).pow(2).mean(-1).mean()]
    terms += [(mapped_ru - ru).pow(2).mean(-1).mean(), (mapped_ru - pivot).pow(2).mean(-1).mean()]
    torch.testing.assert_close(both.distill, torch.stack(terms).mean(), rtol=1e-5, atol=1e-6)  # "en": no vectors
    torch.testing.assert_close(out.loss, out.ranking + 0.5 * out.distill, rtol=1e-5, atol=1e-6)
    out.distill.backward()
    assert model.encoders["shared"].embed.weight.grad.abs().sum() > 0
    assert model.distill_map is None or model.distill_map.weight.grad.abs().sum() > 0
    assert model(sources, targets, ranking_weight=1.0).distill is None  # no teacher, no term
    with pytest.raises(ValueError, match="distill_dim"):
        small_model().distill_loss({"fr": mapped}, teacher)


def test_contrastive_distillation_ranks_the_students_sentence_among_the_teachers_present_rows(corpus):
    """The contrastive term, computed by hand: cosines of the mapped embedding to the teacher's vectors, the
    additive margin on the diagonal, a softmax over the present rows only, both directions; it is zero-free
    where the teacher agrees and grows when the teacher's rows are shuffled; other objectives are refused."""
    from model.nmt import PIVOT

    rows = rows_with(corpus, ["fr", "en"], 5)
    sources, targets = corpus.batch((("fr",), ("en",)), rows)
    model = small_model(shared_encoder=True, nmt_weight=0.0, distill_dim=12, distill_loss="contrastive")
    mapped = model.distill_map(model.encode(*sources["fr"], "fr")).detach()
    torch.manual_seed(3)
    vectors = mapped + 0.01 * torch.randn_like(mapped)  # a teacher that agrees with the student
    present = torch.tensor([True, True, False, True, True])
    out = model(sources, targets, ranking_weight=1.0, teacher={PIVOT: (vectors, present)}, distill_weight=1.0)
    keep = present.nonzero().squeeze(1)
    sim = F.normalize(mapped[keep], dim=-1) @ F.normalize(vectors[keep], dim=-1).T
    logits = model.ranking_scale * (sim - model.ranking_margin * torch.eye(len(keep)))
    labels = torch.arange(len(keep))
    expected = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2
    torch.testing.assert_close(out.distill, expected, rtol=1e-4, atol=1e-5)
    shuffled = model(
        sources, targets, ranking_weight=1.0, distill_weight=1.0, teacher={PIVOT: (vectors[[1, 0, 2, 4, 3]], present)}
    )
    assert shuffled.distill > out.distill + 1.0
    shuffled.distill.backward()
    assert model.distill_map.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="distill_loss"):
        small_model(distill_dim=12, distill_loss="cosine")


@pytest.mark.parametrize("objective", ["mse", "contrastive"])
def test_each_rows_teacher_weight_scales_its_term_and_the_mean_stays_over_the_teachers_rows(corpus, objective):
    """`model.distill_source_weights`: a row's weight multiplies its term; the mean is still over the rows the
    teacher has, so weights of 1 are the unweighted loss, 2 doubles it, 0 removes a row's pull (its vectors
    stay the others' negatives in the contrastive term)."""
    from model.nmt import PIVOT

    rows = rows_with(corpus, ["fr", "en"], 5)
    sources, targets = corpus.batch((("fr",), ("en",)), rows)
    model = small_model(shared_encoder=True, nmt_weight=0.0, distill_dim=12, distill_loss=objective)
    mapped = model.distill_map(model.encode(*sources["fr"], "fr"))
    torch.manual_seed(4)
    present = torch.tensor([True, True, False, True, True])
    teacher = {PIVOT: (torch.randn(5, 12), present)}
    encoded = {"fr": model.encode(*sources["fr"], "fr")}
    plain = model.distill_loss(encoded, teacher)
    torch.testing.assert_close(model.distill_loss(encoded, teacher, torch.ones(5)), plain)
    torch.testing.assert_close(model.distill_loss(encoded, teacher, torch.full((5,), 2.0)), 2 * plain)
    weight = torch.tensor([0.0, 3.0, 5.0, 0.5, 1.0])  # the absent row's weight changes nothing
    if objective == "mse":
        error = (mapped - teacher[PIVOT][0]).pow(2).mean(-1)
    else:
        error = model._teacher_ranking(mapped.float(), teacher[PIVOT][0], present.float())
    expected = (error * weight * present).sum() / present.sum()
    torch.testing.assert_close(model.distill_loss(encoded, teacher, weight), expected, rtol=1e-5, atol=1e-6)
    out = model(sources, targets, ranking_weight=1.0, teacher=teacher, distill_weight=0.5, teacher_weight=weight)
    torch.testing.assert_close(out.distill, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.loss, out.ranking + 0.5 * out.distill, rtol=1e-5, atol=1e-6)


def test_a_distilled_model_saves_and_loads_with_its_map(tmp_path):
    model = small_model(distill_dim=12)
    save_model(model, str(tmp_path / "model.safetensors"))
    loaded, _ = load_model(str(tmp_path / "model.safetensors"))
    torch.testing.assert_close(loaded.distill_map.weight, model.distill_map.weight)


def test_a_header_of_wrong_arguments_is_named_by_its_field(tmp_path):
    """The header is typed (`model.args.ModelArgs`): a file whose arguments are not a model's is refused,
    naming the field, before any weights are read."""
    from safetensors.torch import save_file

    from model.model_file import FORMAT, read_header

    path = tmp_path / "model.safetensors"
    save_file(
        {"w": torch.zeros(1)},
        str(path),
        metadata={"format": FORMAT, "args": '{"languages": "en", "vocab_size": 8}', "meta": "{}"},
    )
    with pytest.raises(ModelFileError, match="languages"):
        read_header(str(path))
    args, meta = read_header(_saved(tmp_path, small_model(), step=7, spm_sha256="ab"))
    assert args == small_model().args and (meta.step, meta.spm_sha256, meta.dev_error) == (7, "ab", None)


def _saved(folder, model, **meta):
    path = folder / "saved.safetensors"
    save_model(model, str(path), **meta)
    return str(path)
