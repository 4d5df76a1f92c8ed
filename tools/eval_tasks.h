/* eval_tasks.h — `locks eval --tasks ...`: long-context tasks on the real model, answered
 * by every selector and budget from one dense prefill (see eval/README.md). */
#ifndef LOCKS_EVAL_TASKS_H
#define LOCKS_EVAL_TASKS_H

/* 1 when argv (the arguments of `locks eval`) asks for the task mode (--tasks). */
int eval_tasks_wanted(int argc, char **argv);
/* Runs the task mode; returns the process exit code (0 ok, 1 failure, 2 usage). */
int eval_tasks_main(int argc, char **argv);

#endif
