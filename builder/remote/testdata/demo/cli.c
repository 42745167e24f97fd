#include <stdio.h>
#include "demo.h"
int main(void) { printf("answer %d\n", demo_answer()); return 0; }
