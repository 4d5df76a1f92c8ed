/* cmds.h — the subcommands of the `locks` tool, one file each (tools/cmd_<name>.c).
 * Each takes the arguments after its name (argv[0] is the subcommand) and returns the
 * process exit code: 0 ok, 1 runtime failure, 2 usage error. */
#ifndef LOCKS_CMDS_H
#define LOCKS_CMDS_H

int cmd_bench(int argc, char **argv);
/* `locks bench --backend cuda` (cmd_bench_cuda.c): the GPU benchmark. */
int cmd_bench_cuda(int argc, char **argv);
/* `locks bench --backend cuda --model NAME | --gguf FILE` (cmd_bench_model_cuda.c): whole-model decode. */
int cmd_bench_model_cuda(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_eval(int argc, char **argv);
/* `locks bench-matmul` (cmd_bench_matmul.c): a model's matrix products per kernel path. */
int cmd_bench_matmul(int argc, char **argv);
/* `locks serve` (cmd_serve.c, tools/serve/): the OpenAI-compatible server. */
int cmd_serve(int argc, char **argv);
/* `locks eval --fidelity FILE...` (tools/cmd_fidelity.c): 1 when argv asks for it. */
int fidelity_wanted(int argc, char **argv);
int fidelity_main(int argc, char **argv);
/* `locks bench --ranks N` (cmd_bench_cp.c): the context-parallel step; locks.c routes it. */
int cmd_bench_cp(int argc, char **argv);

/* What a tool prints for a failed library call: the status' name and, when the library
 * said why (locks_last_error), its reason: "invalid argument (locks_decode_step: n_q_heads
 * 12 is not a positive multiple of n_kv_heads 8)". Read it right after the failing call.
 * The string lives until the next call (one buffer per thread). */
const char *tool_why(int status);

/* For the GPU benchmarks: runs a library call; on failure prints where and why, sets the
 * caller's rc = 1 and jumps to its done: label (needs <stdio.h> and locks.h). */
#define TRY(call)                                                                                      \
    do {                                                                                               \
        locks_status st_ = (call);                                                                     \
        if (st_ != LOCKS_OK) {                                                                         \
            fprintf(stderr, "locks bench: %s:%d: %s -> %s\n", __FILE__, __LINE__, #call,               \
                    tool_why(st_));                                                                    \
            rc = 1;                                                                                    \
            goto done;                                                                                 \
        }                                                                                              \
    } while (0)

#endif
