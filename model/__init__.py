"""The multilingual NMT model whose encoders give the sentence embeddings (plain PyTorch).

    encoder.SentenceEncoder   tokens -> one fixed-size vector (BLSTM + max-pool, or LSTM last state)
    decoder.SentenceDecoder   that vector -> the sentence in one language (no attention)
    nmt.MultilingualNMT       one encoder per input and one decoder per output language
                              (or shared ones), the training paths' losses, `encode()`
    paths                     1:1, 1:N, M:1, M:N path specs and their sampling

No Ray or MLflow here: `orchestration.train` runs it.
"""
