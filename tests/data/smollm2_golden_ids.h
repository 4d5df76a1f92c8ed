/* Greedy continuations (16 tokens, full attention, int8 activations, 2 threads) recorded
 * with `LOCKS_GOLDEN_PRINT=1 build/test_model_golden` on 2026-11-29 (x86-64, AVX2 path).
 * raw:  "The three primary colors are" -> " red, blue, and yellow.\n\nThe color of the universe is a"
 * chat: "What is the capital of France?" -> "The capital of France is Paris.<|im_end|>..."
 * long: 12 lockers, "what color is locker 7?" -> " green.\nThe answer is: green.<|im_end|>..."
 *       (the 135M model is wrong: locker 7 is amber; the test checks the engine, not it) */
/* raw */ {2382, 28, 4461, 28, 284, 5724, 30, 198, 198, 504, 2380, 282, 260, 6128, 314, 253},
/* chat */ {504, 3575, 282, 4649, 314, 7042, 30, 2, 198, 2, 1, 9690, 198, 2, 198, 1},
/* long */ {2654, 30, 198, 504, 2988, 314, 42, 2654, 30, 2, 198, 1, 520, 9531, 198, 504},
