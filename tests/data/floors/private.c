/* A file of sched/ including a private header of a lower floor (graphs/):
 * must not compile. */
#include "graphs/forward.h"
int sd_probe;
