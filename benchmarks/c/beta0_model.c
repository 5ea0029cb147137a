/* A C model of Kina's threaded, packed K = 512 matmul (benchmarks/README.md, "Buffers on cache
 * lines; register tiles that start from registers"): what the result's zero fill costs.
 *
 *   cc -O3 -march=native -fopenmp benchmarks/c/beta0_model.c -o /tmp/beta0 && OMP_NUM_THREADS=2 /tmp/beta0 512 512 8192 5
 *
 * C[M, N] = A[M, K] @ B[K, N] with AVX-512 8 x 32 register tiles over column panels of bn
 * (one per OpenMP task; each packs its panel of B into [bn / 32][K][32] strips), rows in
 * blocks of bm, k in blocks of kb.  zero=0: the panel of C is memset and every tile loads
 * its C tile first (what -O2 did); zero=1: no memset, the first k block's tiles start from
 * zero registers (the "@zero-tiles" slot); zero=2: zero registers, but the memset kept.
 * Prints GFLOP/s per configuration. */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

__attribute__((noinline)) static void tile(const float *A, int lda, const float *B, int ldb, float *C, int ldc, int K,
                                           int zero) {
  __m512 c[8][2];
  for (int i = 0; i < 8; i++)
    for (int v = 0; v < 2; v++) c[i][v] = zero ? _mm512_setzero_ps() : _mm512_loadu_ps(C + i * ldc + 16 * v);
  for (int k = 0; k < K; k++) {
    __m512 b0 = _mm512_loadu_ps(B + k * ldb), b1 = _mm512_loadu_ps(B + k * ldb + 16);
    for (int i = 0; i < 8; i++) {
      __m512 a = _mm512_set1_ps(A[i * lda + k]);
      c[i][0] = _mm512_fmadd_ps(a, b0, c[i][0]);
      c[i][1] = _mm512_fmadd_ps(a, b1, c[i][1]);
    }
  }
  for (int i = 0; i < 8; i++)
    for (int v = 0; v < 2; v++) _mm512_storeu_ps(C + i * ldc + 16 * v, c[i][v]);
}

static int M, N, K;

static void product(const float *A, const float *B, float *C, float *P0, int bn, int bm, int kb, int zero) {
#pragma omp parallel for schedule(static)
  for (int j = 0; j < N; j += bn) {
    float *P = P0 + (long)omp_get_thread_num() * K * bn;
    for (int s = 0; s < bn / 32; s++)
      for (int k = 0; k < K; k++) memcpy(P + (long)s * K * 32 + k * 32, B + (long)k * N + j + s * 32, 128);
    if (zero != 1)
      for (int i = 0; i < M; i++) memset(C + (long)i * N + j, 0, 4 * bn);
    for (int ib = 0; ib < M; ib += bm)
      for (int k0 = 0; k0 < K; k0 += kb)
        for (int s = 0; s < bn / 32; s++)
          for (int i = ib; i < ib + bm; i += 8)
            tile(A + (long)i * K + k0, K, P + (long)s * K * 32 + k0 * 32, 32, C + (long)i * N + j + s * 32, N, kb,
                 zero && k0 == 0);
  }
}

int main(int argc, char **argv) {
  if (argc < 5) { fprintf(stderr, "usage: %s M K N REPS\n", argv[0]); return 2; }
  M = atoi(argv[1]); K = atoi(argv[2]); N = atoi(argv[3]);
  int reps = atoi(argv[4]);
  float *A = aligned_alloc(64, 4L * M * K), *B = aligned_alloc(64, 4L * K * N), *C = aligned_alloc(64, 4L * M * N);
  float *P = aligned_alloc(64, 4L * K * 256 * omp_get_max_threads());
  for (long i = 0; i < (long)M * K; i++) A[i] = 1e-3f;
  for (long i = 0; i < (long)K * N; i++) B[i] = 1e-3f;
  int cfg[][3] = {{128, 64, 64}, {128, 64, 256}, {128, 128, 512}};
  for (int c = 0; c < 3; c++)
    for (int zero = 0; zero < 3; zero++) {
      int bn = cfg[c][0], bm = cfg[c][1], kb = cfg[c][2] < K ? cfg[c][2] : K;
      if (N % bn || M % bm || K % kb) continue;
      product(A, B, C, P, bn, bm, kb, zero);
      double t = now();
      for (int r = 0; r < reps; r++) product(A, B, C, P, bn, bm, kb, zero);
      t = now() - t;
      printf("bn %d bm %d kb %d zero=%d: %.1f GFLOP/s\n", bn, bm, kb, zero, 2.0 * M * N * K * reps / t / 1e9);
    }
  return 0;
}
