"""Test-only stand-in for megatron.training.tokenizer.tokenizer (Megatron-LM only): slime imports _vocab_size_with_padding when megatron-core lacks its newer home; Megatron's rounding rule, used only with --vocab-size."""


def _vocab_size_with_padding(orig_vocab_size: int, args, logging_enabled: bool = True) -> int:
    multiple = args.make_vocab_size_divisible_by * args.tensor_model_parallel_size
    return -(-orig_vocab_size // multiple) * multiple
