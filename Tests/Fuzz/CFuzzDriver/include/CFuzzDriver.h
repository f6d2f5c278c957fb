// libFuzzer's driver, started from each fuzz target's main: SwiftPM names an executable's entry
// point after its target, so the `main` libFuzzer brings cannot be used.
#include <stddef.h>
#include <stdint.h>

/// Runs libFuzzer (`Target CORPUS_DIR… [-flags]`, or `Target FILE` to replay one input) on the
/// target's `LLVMFuzzerTestOneInput`, and returns its exit status.
int tonearm_fuzz_main(int argc, char **argv);
