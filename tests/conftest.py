import pytest
import torch


@pytest.fixture(scope="session")
def tokenizer():
    """The tiny tokenizer, trained on texts of 30 vault games (T = 40)."""
    from tempo_plugin.backends.local.bootstrap import tokenizer_corpus
    from tempo_plugin.backends.local.tiny import build_tokenizer

    return build_tokenizer(tokenizer_corpus(40, games=30))


@pytest.fixture(scope="session")
def protocol(tokenizer):
    from tempo_plugin.rollout.protocol import ChatProtocol

    return ChatProtocol(tokenizer)


@pytest.fixture()
def tiny_model(tokenizer):
    from tempo_plugin.backends.local.tiny import build_tiny_model

    torch.manual_seed(0)
    model = build_tiny_model(len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    model.eval()
    return model
