import pytest
import torch


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from tempo_plugin.backends.local.bootstrap import tokenizer_corpus
    from tempo_plugin.backends.local.tiny import build_tokenizer

    return build_tokenizer(tokenizer_corpus(40, games=30))


@pytest.fixture()
def tiny_model(tiny_tokenizer):
    from tempo_plugin.backends.local.tiny import build_tiny_model

    torch.manual_seed(0)
    model = build_tiny_model(len(tiny_tokenizer), tiny_tokenizer.pad_token_id, tiny_tokenizer.eos_token_id)
    model.eval()
    return model
