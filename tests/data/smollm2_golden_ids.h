/* Greedy continuations (16 tokens, full attention, fp32 activations) recorded with
 * `LOCKS_GOLDEN_PRINT=1 build/test_model_golden` on 2026-11-29 (x86-64, AVX2 path).
 * Smallest top-1 margins 0.09 / 0.08 / 0.13 logits, against ~3e-3 agreement with the
 * float64 reference, so the ids do not hinge on rounding.
 * raw:  "Water boils at 100 degrees Celsius, and it freezes at"
 *       -> " 0 degrees Celsius.\n\nThe ratio of the boiling point to the freezing"
 * chat: "What is the capital of France?" -> "The capital of France is Paris.<|im_end|>..."
 * long: 9 lockers, "what color is locker 7?" -> " silver and holds 36 books.\nThe answer is: 7\n"
 *       (the 135M model is wrong: locker 7 is amber; the test checks the engine, not it) */
/* raw */ {216, 32, 5027, 20590, 30, 198, 198, 504, 6714, 282, 260, 16891, 1225, 288, 260, 16127},
/* chat */ {504, 3575, 282, 4649, 314, 7042, 30, 2, 198, 2, 1, 9690, 198, 2, 198, 1},
/* long */ {8499, 284, 6650, 216, 35, 38, 2905, 30, 198, 504, 2988, 314, 42, 216, 39, 198},
