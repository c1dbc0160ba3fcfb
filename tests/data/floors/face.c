/* A file of sched/ including its own header and the faces below it: compiles
 * (the control for upward.c and private.c). */
#include "base/base.h"
#include "graphs/graph.h"
#include "sched/runtime.h"
int sd_probe;
