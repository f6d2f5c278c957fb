#include "CFuzzDriver.h"

// Defined by libFuzzer (linked by -sanitize=fuzzer) and by the target (`@_cdecl`) respectively.
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int tonearm_fuzz_main(int argc, char **argv) {
    return LLVMFuzzerRunDriver(&argc, &argv, LLVMFuzzerTestOneInput);
}
