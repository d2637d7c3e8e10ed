/* LD_PRELOAD shim: log every cudaMalloc / cudaMallocHost / cudaFree / cudaFreeHost with its size.
 *
 * The CUDA analogue of GGML_RPC_DEBUG: llama-server prints its buffers in MiB with two decimals; this
 * log gives the bytes. One line per call: "<call> <device> <ptr> <bytes> <rc> <seconds>" to the file
 * named by $CUDALOG. Built and used by tests/ledger/gpu/run.sh on the GPU machine only.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int (*alloc_fn)(void **, size_t);
typedef int (*free_fn)(void *);
typedef int (*getdev_fn)(int *);

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *out;

static void note(const char *call, void *ptr, size_t size, int rc) {
    static getdev_fn getdev;
    int dev = -1;
    struct timespec ts;
    if (!getdev) getdev = (getdev_fn)dlsym(RTLD_NEXT, "cudaGetDevice");
    if (getdev) getdev(&dev);
    clock_gettime(CLOCK_REALTIME, &ts);
    pthread_mutex_lock(&lock);
    if (!out) {
        const char *path = getenv("CUDALOG");
        out = fopen(path ? path : "/dev/stderr", "a");
    }
    if (out) {
        fprintf(out, "%s %d %p %zu %d %ld.%06ld\n", call, dev, ptr, size, rc, (long)ts.tv_sec, ts.tv_nsec / 1000);
        fflush(out);
    }
    pthread_mutex_unlock(&lock);
}

#define ALLOC(name)                                                     \
    int name(void **ptr, size_t size) {                                 \
        static alloc_fn real;                                           \
        if (!real) real = (alloc_fn)dlsym(RTLD_NEXT, #name);            \
        int rc = real(ptr, size);                                       \
        note(#name, rc == 0 ? *ptr : NULL, size, rc);                   \
        return rc;                                                      \
    }

#define FREE(name)                                                      \
    int name(void *ptr) {                                               \
        static free_fn real;                                            \
        if (!real) real = (free_fn)dlsym(RTLD_NEXT, #name);             \
        int rc = real(ptr);                                             \
        note(#name, ptr, 0, rc);                                        \
        return rc;                                                      \
    }

ALLOC(cudaMalloc)
ALLOC(cudaMallocHost)
FREE(cudaFree)
FREE(cudaFreeHost)
