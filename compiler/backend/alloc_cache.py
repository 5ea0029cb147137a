"""Heap buffers of -O2 libraries: a per-library cache of freed blocks, so a step called
again reuses the buffers of the last call instead of asking the OS for fresh pages.

Why: the buffers of a kernel's intermediates are malloc'd and freed within each call.
glibc returns a large free block at the top of its heap to the OS (`brk`), so the next
call's malloc gets fresh pages, and its first writes page-fault and zero them: in a loop
of scaled StoryLM train steps 37% of the CPU time was the kernel's page faults and
`clear_page` (perf), and the zero fills of the gradients ran at 2 GB/s.  How much of
that a process sees depends on glibc's dynamic thresholds (its past allocations), so a
step's speed depended on what the host process had done before.

How: `finalize-memref-to-llvm=use-generic-functions` makes the lowered code call
`_mlir_memref_to_llvm_alloc` / `_mlir_memref_to_llvm_free` instead of malloc / free;
RUNTIME_C defines them, and the library links its object (`link_sources`, compiled once
per C compiler: `runtime_object`) when the library's object calls them.  A block of at least MIN_CACHED bytes goes back into the cache when freed (up to
SLOTS blocks and KINA_ALLOC_CACHE_MB megabytes, default 1024, 0: no cache), and an
allocation of the same size takes the most recently freed one; everything else is plain
malloc / free.  A mutex makes it safe for calls from several threads and the OpenMP
threads.  The cache holds at most what one call had freed (a step's working set); it is
released when the library is unloaded.  -O0 keeps malloc / free.
"""
from __future__ import annotations

from pathlib import Path

FINALIZE_FLAG = "--finalize-memref-to-llvm=use-generic-functions"
ALLOC_SYMBOL = b"_mlir_memref_to_llvm_alloc"
MIN_CACHED = 64 * 1024
SLOTS = 256
RUNTIME_C = r"""
/* Kina -O2 library heap buffers (compiler/backend/alloc_cache.py): a cache of freed blocks. */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>

#define ALIGN 64
#define HEADER 64                  /* holds the block's size; keeps the block's alignment */
#define MIN_CACHED @MIN_CACHED@
#define SLOTS @SLOTS@

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char *blocks[SLOTS];
static size_t sizes[SLOTS];
static int count;
static size_t cached, limit = (size_t)-1;

static size_t cache_limit(void) {
  if (limit == (size_t)-1) {
    const char *mb = getenv("KINA_ALLOC_CACHE_MB");
    limit = (size_t)(mb && *mb ? strtoull(mb, NULL, 10) : 1024) << 20;
  }
  return limit;
}

void *_mlir_memref_to_llvm_alloc(size_t n) {
  if (n >= MIN_CACHED) {
    pthread_mutex_lock(&lock);
    for (int i = count - 1; i >= 0; i--) {
      if (sizes[i] == n) {
        char *b = blocks[i];
        for (int j = i; j + 1 < count; j++) { blocks[j] = blocks[j + 1]; sizes[j] = sizes[j + 1]; }
        count--;
        cached -= n;
        pthread_mutex_unlock(&lock);
        return b + HEADER;
      }
    }
    pthread_mutex_unlock(&lock);
  }
  /* 64-byte aligned (a cache line, one AVX-512 vector): malloc's 16 put a large block's
     rows 16 bytes into a line, so every vector load and store of a row crossed two lines
     (a [512, 512] @ [512, 8192] product into such a buffer ran 4-9% slower) */
  void *p;
  if (posix_memalign(&p, ALIGN, n + HEADER)) return NULL;
  char *b = p;
  *(size_t *)b = n;
  return b + HEADER;
}

void _mlir_memref_to_llvm_free(void *p) {
  if (!p) return;
  char *b = (char *)p - HEADER;
  size_t n = *(size_t *)b;
  if (n >= MIN_CACHED) {
    pthread_mutex_lock(&lock);
    if (count < SLOTS && cached + n <= cache_limit()) {
      blocks[count] = b;
      sizes[count++] = n;
      cached += n;
      pthread_mutex_unlock(&lock);
      return;
    }
    pthread_mutex_unlock(&lock);
  }
  free(b);
}

/* Bytes held by the cache (for tests and diagnostics). */
size_t kina_alloc_cache_bytes(void) {
  pthread_mutex_lock(&lock);
  size_t n = cached;
  pthread_mutex_unlock(&lock);
  return n;
}

__attribute__((destructor)) static void release(void) {
  for (int i = 0; i < count; i++) free(blocks[i]);
  count = 0;
  cached = 0;
}
""".replace("@MIN_CACHED@", str(MIN_CACHED)).replace("@SLOTS@", str(SLOTS))


def uses_cache(obj: Path) -> bool:
    """Whether the object calls the cache's allocation function (its symbol table names it)."""
    return ALLOC_SYMBOL in obj.read_bytes()


def link_sources(obj: Path) -> list[str]:
    """cc arguments that link RUNTIME_C's object into the library (empty when the object
    does not call it)."""
    if not uses_cache(obj):
        return []
    return [str(runtime_object(obj.parent)), "-lpthread"]


def runtime_object(work_dir: Path) -> Path:
    """RUNTIME_C compiled once per C compiler and kept beside the build cache
    (`<cache root>/.runtime/`, which eviction leaves alone): compiling it took 30-300 ms
    of every -O2 build.  Compiled into `work_dir` when that directory is not writable."""
    import hashlib
    import os
    import shutil
    import subprocess

    from compiler.backend.cache import cache_root
    from compiler.backend.errors import StageFailed
    from compiler.backend.tools import find_tool
    cc = str(find_tool("cc"))
    key = hashlib.sha256(f"{RUNTIME_C}\0{cc}".encode()).hexdigest()[:16]
    target = cache_root() / ".runtime" / f"kina_alloc_cache-{key}.o"
    if target.is_file():
        return target
    src, built = work_dir / "kina_alloc_cache.c", work_dir / "kina_alloc_cache.o"
    src.write_text(RUNTIME_C)
    proc = subprocess.run([cc, "-O2", "-fPIC", "-c", str(src), "-o", str(built)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise StageFailed("cc", proc.stderr or "cc could not compile the -O2 buffer cache")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}")
        shutil.copyfile(built, partial)
        os.replace(partial, target)    # atomic: a concurrent build sees all of it or nothing
        return target
    except OSError:
        return built
