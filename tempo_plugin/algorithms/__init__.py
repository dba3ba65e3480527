"""Pure math of the credit-assignment methods: lists and tensors in, lists and tensors out, no I/O."""
