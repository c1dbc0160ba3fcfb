/* the one violation: a lower floor reaching up */
#include "high/high.h"
