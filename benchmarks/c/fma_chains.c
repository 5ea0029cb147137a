/* How many independent FMA chains a core needs to reach its FMA peak (benchmarks/README.md,
 * "On a Zen 2: the register tile's accumulators bound the matmuls").
 *
 *   cc -O3 -march=native benchmarks/c/fma_chains.c -o /tmp/fma_chains && /tmp/fma_chains
 *
 * Each chain is one 8-float accumulator updated by a dependent FMA per iteration, as each
 * vector of C in a register tile is once per k step.  A core reaches its peak only with at
 * least (FMA latency x FMA units per cycle) chains: 8 with a 4-cycle latency and 2 units,
 * 10 on a Zen 2, whose FMA latency is 5 cycles.  -O2's AVX2 register tile (4 x 16 floats)
 * has 8 vectors of C, so it can reach at most 8 / 10 of a Zen 2's peak.
 * Prints GFLOP/s of one core for 4, 6, 8, 10 and 12 chains, three times. */
#include <stdio.h>
#include <time.h>

typedef float v8 __attribute__((vector_size(32)));

#define CHAINS(NC)                                                                          \
  static double run##NC(long iters) {                                                       \
    v8 a[NC], b, c;                                                                         \
    for (int j = 0; j < 8; j++) { b[j] = 1.000001f; c[j] = 1e-7f; }                         \
    for (int i = 0; i < NC; i++) a[i] = c * (float)i;                                       \
    struct timespec t0, t1;                                                                 \
    clock_gettime(CLOCK_MONOTONIC, &t0);                                                    \
    for (long n = 0; n < iters; n++) {                                                      \
      for (int i = 0; i < NC; i++) a[i] = a[i] * b + c;                                     \
      __asm__ volatile("" : "+x"(b)); /* keeps the compiler from folding iterations */    \
    }                                                                                       \
    clock_gettime(CLOCK_MONOTONIC, &t1);                                                    \
    v8 s = a[0];                                                                            \
    for (int i = 1; i < NC; i++) s += a[i];                                                 \
    volatile float sink = s[0];                                                             \
    (void)sink;                                                                             \
    double dt = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);                 \
    return iters * (double)NC * 16 / dt / 1e9;                                              \
  }

CHAINS(4) CHAINS(6) CHAINS(8) CHAINS(10) CHAINS(12)

int main(void) {
  long iters = 100000000;
  for (int r = 0; r < 3; r++)
    printf("chains 4: %.1f  6: %.1f  8: %.1f  10: %.1f  12: %.1f GFLOP/s (one core)\n",
           run4(iters), run6(iters), run8(iters), run10(iters), run12(iters));
  return 0;
}
