# Included by ctest after the discovered GoogleTest tests: the parity tests need the fetched tokenizers.
# (ctest's set_tests_properties ignores names that were not discovered.)
set_tests_properties(TokenizerRealParity.Gemma3 TokenizerRealParity.Qwen3 TokenizerRealParity.Llama31 TokenizerRealParity.Gemma3Metadata
  TokenizerRealParity.ConcurrentEncodeMatchesReference
  PROPERTIES FIXTURES_REQUIRED vatic_tokenizer_reference)
