/* A file of sched/ including a header of a higher floor: must not compile. */
#include "engine/api.h"
int sd_probe;
