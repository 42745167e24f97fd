#include "demo.h"
int demo_answer(void) { return 42; }
