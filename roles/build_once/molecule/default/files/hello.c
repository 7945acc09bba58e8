#include <stdio.h>

int main(void) {
    puts("hello from build_once");
    return 0;
}
