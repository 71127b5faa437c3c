// The CPU emulation of a CUDA device (cuda_runtime.h says what it promises). Fibers: each
// stack is entered once through ucontext and from then on switched with _setjmp/_longjmp,
// which save no signal mask, so a switch costs nanoseconds, not a system call; a stack runs
// one thread after another. The scheduler runs every runnable thread of the block until it
// waits or exits, then completes whatever rendezvous every participant has reached; when
// none can complete, the block is deadlocked.
#undef _FORTIFY_SOURCE  // its longjmp check refuses jumps between stacks, which is the point here
#include <fenv.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <cblas.h>

#include <map>
#include <string>
#include <vector>

#include "cublas_v2.h"
#include "cuda_bf16.h"
#include "cuda_runtime.h"

dim3 threadIdx(0, 0, 0), blockIdx(0, 0, 0), blockDim, gridDim;

#define SHARED_DEFAULT (48 * 1024)       // dynamic shared memory without an opt-in
#define SHARED_OPT_IN_MAX (227 * 1024)   // sm_90's largest opt-in per block
#define STACK_BYTES (256 * 1024)

// ---- the running launch, for every report ----
enum State { NOT_STARTED, READY, WAITING, EXITED };
struct Stack;
struct Fiber {
    dim3 idx;
    State state;
    jmp_buf env;
    Stack* stack;
    bool at_barrier;  // else at a warp operation
    EmuWarpOp op;
    unsigned mask;
    int arg, width, line;
    const char* file;
    uint64_t value, result;
};
static const EmuLaunchConfig* launch;
const char* host_call;  // the API call running outside kernels, for reports
static bool blocks_running;    // launch's blocks have started (else a report is about the launch itself)
static std::vector<Fiber> fibers;
static Fiber* running;

// Ends the program with a report naming where it happened: the kernel, block and thread, or
// the API call
static void report(const char* fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void report(const char* fmt, ...) {
    fflush(stdout);
    if (launch && running) {
        fprintf(stderr, "cuda-emulated: kernel %s (launched at %s:%d), block (%u,%u,%u), thread (%u,%u,%u): ", launch->name,
                launch->file, launch->line, blockIdx.x, blockIdx.y, blockIdx.z, running->idx.x, running->idx.y, running->idx.z);
    } else if (launch && blocks_running) {
        fprintf(stderr, "cuda-emulated: kernel %s (launched at %s:%d), block (%u,%u,%u): ", launch->name, launch->file,
                launch->line, blockIdx.x, blockIdx.y, blockIdx.z);
    } else if (launch) {
        fprintf(stderr, "cuda-emulated: kernel %s (launched at %s:%d): ", launch->name, launch->file, launch->line);
    } else {
        fprintf(stderr, "cuda-emulated: %s: ", host_call ? host_call : "host code");
    }
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    _exit(1);
}

// ---- guarded memory: every device allocation and every shared array ends at a guard page
// (and starts one page after another), so a step past either end faults at once ----
struct Region {
    char* map;
    size_t map_bytes;
    char* user;
    size_t bytes;
    std::string what;
    bool device;
};
static std::map<uintptr_t, Region> regions;  // by user address
static size_t live_device_bytes, peak_device_bytes;

static size_t page_bytes(void) {
    static size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return page;
}
static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

static Region* guarded_alloc(size_t bytes, const std::string& what, bool device) {
    size_t page = page_bytes(), body = round_up(bytes ? bytes : 1, page), len = body + 2 * page;
    char* map = (char*)mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED) return NULL;
    if (mprotect(map, page, PROT_NONE) != 0 || mprotect(map + page + body, page, PROT_NONE) != 0) report("mprotect failed");
    // the end of the data touches the trailing guard page; 4-byte aligned, as every element is
    char* user = map + page + body - round_up(bytes, 4);
    Region r = {map, len, user, bytes, what, device};
    return &(regions[(uintptr_t)user] = r);
}

static void guarded_free(Region* r) {
    munmap(r->map, r->map_bytes);
    regions.erase((uintptr_t)r->user);
}

// The device allocation holding [p, p + bytes), or NULL
static const Region* device_region(const void* p, size_t bytes) {
    uintptr_t a = (uintptr_t)p;
    auto it = regions.upper_bound(a);
    if (it == regions.begin()) return NULL;
    --it;
    const Region& r = it->second;
    if (!r.device || a + bytes > (uintptr_t)r.user + r.bytes) return NULL;
    return &r;
}

// ---- signals: a fault or a trapped invalid operation becomes a report ----
static void describe_fault(uintptr_t a, bool write_known, bool write) {
    const char* access = !write_known ? "access" : write ? "write" : "read";
    for (auto& [user, r] : regions) {
        if (a < (uintptr_t)r.map || a >= (uintptr_t)r.map + r.map_bytes) continue;
        if (a >= user) report("out-of-bounds %s at byte %zu of %s of %zu bytes", access, (size_t)(a - user), r.what.c_str(), r.bytes);
        report("out-of-bounds %s at byte -%zu of %s of %zu bytes", access, (size_t)(user - a), r.what.c_str(), r.bytes);
    }
    if (running && running->stack) report("the thread's stack (%d KiB) overflowed, or a stray %s at %p", STACK_BYTES / 1024, access,
                                          (void*)a);
    report("invalid %s at %p, which no device allocation holds (host memory, freed memory or a wild pointer)", access, (void*)a);
}

static void on_signal(int sig, siginfo_t* info, void* context) {
    if (sig == SIGFPE) {
        report("invalid floating-point operation: arithmetic on shared memory that no thread of this block wrote (it "
               "holds a signalling NaN), or inf - inf, 0 * inf and the like");
    }
    bool write_known = false, write = false;
#if defined(__x86_64__)
    write_known = true;
    write = (((ucontext_t*)context)->uc_mcontext.gregs[REG_ERR] & 2) != 0;
#else
    (void)context;
#endif
    describe_fault((uintptr_t)info->si_addr, write_known, write);
}

static void install_handlers(void) {
    static bool done;
    if (done) return;
    done = true;
    static char alt[64 * 1024];
    stack_t ss = {};
    ss.ss_sp = alt;
    ss.ss_size = sizeof(alt);
    sigaltstack(&ss, NULL);
    struct sigaction sa = {};
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
    sigaction(SIGFPE, &sa, NULL);
}

// ---- fibers ----
struct Stack {
    char* base;
    jmp_buf env;
    bool started;
    ucontext_t uc;
};
static std::vector<Stack*> idle_stacks;
static jmp_buf scheduler;
static const std::function<void()>* body;

// An exited thread's stack waits here for the next thread to start on it
static void __attribute__((noinline)) park(Fiber* f) {
    Stack* s = f->stack;
    f->state = EXITED;
    f->stack = NULL;
    idle_stacks.push_back(s);
    if (!_setjmp(s->env)) _longjmp(scheduler, 1);
}

static void stack_main(void) {
    for (;;) {
        (*body)();
        park(running);
    }
}

static Stack* take_stack(void) {
    if (!idle_stacks.empty()) {
        Stack* s = idle_stacks.back();
        idle_stacks.pop_back();
        return s;
    }
    size_t page = page_bytes();
    char* map = (char*)mmap(NULL, STACK_BYTES + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED || mprotect(map, page, PROT_NONE) != 0) report("cannot map a thread's stack");
    Stack* s = new Stack();
    s->base = map + page;
    return s;
}

// A stack's first use enters it through ucontext (stack_main), once; from a function of its own
// that keeps nothing in locals, since getcontext returns twice for all the compiler knows
static Stack* fresh;
static void __attribute__((noinline, noreturn)) start_fresh(void) {
    getcontext(&fresh->uc);
    fresh->uc.uc_stack.ss_sp = fresh->base;
    fresh->uc.uc_stack.ss_size = STACK_BYTES;
    fresh->uc.uc_link = NULL;
    makecontext(&fresh->uc, stack_main, 0);
    setcontext(&fresh->uc);
    report("setcontext failed");
}

// Switches to f: a first start on an idle stack, or back to where it waits
static void __attribute__((noinline, noreturn)) enter(Fiber* f) {
    if (f->state == NOT_STARTED) {
        Stack* s = take_stack();
        f->stack = s;
        f->state = READY;
        if (!s->started) {
            s->started = true;
            fresh = s;
            start_fresh();
        }
        _longjmp(s->env, 1);
    }
    _longjmp(f->env, 1);
}

// Runs f until it waits at a rendezvous or exits
static void run(Fiber* f) {
    running = f;
    threadIdx = f->idx;
    if (!_setjmp(scheduler)) enter(f);
}

static void wait_here(void) {
    Fiber* f = running;
    f->state = WAITING;
    if (!_setjmp(f->env)) _longjmp(scheduler, 1);
}

static void in_kernel(const char* what) {
    if (!running || running->state != READY) report("%s called outside a kernel", what);
}

void emu_syncthreads(const char* file, int line) {
    in_kernel("__syncthreads");
    running->at_barrier = true;
    running->file = file;
    running->line = line;
    wait_here();
}

uint64_t emu_warp_op(EmuWarpOp op, unsigned mask, uint64_t value, int arg, int width, const char* file, int line) {
    in_kernel("a warp operation");
    Fiber* f = running;
    f->at_barrier = false;
    f->op = op;
    f->mask = mask;
    f->value = value;
    f->arg = arg;
    f->width = width;
    f->file = file;
    f->line = line;
    wait_here();
    return running->result;
}

static const char* op_name(EmuWarpOp op) {
    static const char* names[] = {"__shfl_sync", "__shfl_xor_sync", "__shfl_up_sync", "__shfl_down_sync", "__ballot_sync",
                                  "__all_sync", "__any_sync", "__syncwarp"};
    return names[op];
}

static bool same_site(const Fiber& a, const Fiber& b) { return a.line == b.line && strcmp(a.file, b.file) == 0; }

// Completes the warp operations whose every lane has arrived; reports a lane that exited
// while its warp waits, and lanes of one mask at different operations
static bool complete_warp_ops(void) {
    int n = (int)fibers.size();
    bool released = false;
    for (int w0 = 0; w0 < n; w0 += 32) {
        int lanes = n - w0 < 32 ? n - w0 : 32;
        for (int l = 0; l < lanes; l++) {
            Fiber& f = fibers[w0 + l];
            if (f.state != WAITING || f.at_barrier) continue;
            running = &f;
            threadIdx = f.idx;
            if (!(f.mask >> l & 1)) report("%s at %s:%d with mask 0x%08x, which leaves out the calling lane %d", op_name(f.op), f.file, f.line, f.mask, l);
            bool complete = true;
            for (int k = 0; k < 32; k++) {
                if (!(f.mask >> k & 1)) continue;
                if (k >= lanes) {
                    report("%s at %s:%d: mask 0x%08x names lane %d, but this warp has only %d threads", op_name(f.op), f.file, f.line,
                           f.mask, k, lanes);
                }
                Fiber& g = fibers[w0 + k];
                if (g.state == EXITED) {
                    report("%s at %s:%d reached by part of warp %d: lane %d of mask 0x%08x has exited", op_name(f.op), f.file, f.line,
                           w0 / 32, k, f.mask);
                }
                if (g.state != WAITING || g.at_barrier) {
                    complete = false;
                    continue;
                }
                if (g.op != f.op || g.mask != f.mask || !same_site(f, g)) {
                    report("lanes %d and %d of warp %d meet at different warp operations: %s at %s:%d (mask 0x%08x) and %s at %s:%d "
                           "(mask 0x%08x)", l, k, w0 / 32, op_name(f.op), f.file, f.line, f.mask, op_name(g.op), g.file, g.line, g.mask);
                }
            }
            if (!complete) continue;
            uint64_t ballot = 0;
            for (int k = 0; k < 32; k++) {
                if (f.mask >> k & 1) ballot |= (uint64_t)(fibers[w0 + k].value != 0) << k;
            }
            for (int k = 0; k < 32; k++) {
                if (!(f.mask >> k & 1)) continue;
                Fiber& g = fibers[w0 + k];
                int width = g.width, seg = k & ~(width - 1), src = k;
                if (width < 1 || width > 32 || (width & (width - 1))) report("%s at %s:%d with width %d", op_name(g.op), g.file, g.line, width);
                switch (g.op) {
                    case EMU_SHFL_IDX: src = seg + (g.arg & (width - 1)); break;
                    case EMU_SHFL_XOR: src = (k ^ g.arg) < seg + width && (k ^ g.arg) >= seg ? k ^ g.arg : k; break;
                    case EMU_SHFL_UP: src = k - g.arg >= seg ? k - g.arg : k; break;
                    case EMU_SHFL_DOWN: src = k + g.arg < seg + width ? k + g.arg : k; break;
                    default: break;
                }
                if (src < 0 || src >= 32 || !(f.mask >> src & 1)) {
                    running = &g;
                    threadIdx = g.idx;
                    report("%s at %s:%d reads lane %d, which is not in the mask 0x%08x", op_name(g.op), g.file, g.line, src, f.mask);
                }
                switch (g.op) {
                    case EMU_BALLOT: g.result = ballot; break;
                    case EMU_ALL: g.result = ballot == (uint64_t)f.mask; break;
                    case EMU_ANY: g.result = ballot != 0; break;
                    case EMU_SYNCWARP: g.result = 0; break;
                    default: g.result = fibers[w0 + src].value; break;
                }
            }
            for (int k = 0; k < 32; k++) {
                if (f.mask >> k & 1) fibers[w0 + k].state = READY;
            }
            released = true;
        }
    }
    running = NULL;
    return released;
}

// One line per distinct wait, for a deadlock's report
static std::string waits(void) {
    std::string out;
    int n = (int)fibers.size(), shown = 0;
    for (int t = 0; t < n && shown < 6;) {
        const Fiber& f = fibers[t];
        int u = t + 1;
        while (u < n && fibers[u].state == f.state && fibers[u].at_barrier == f.at_barrier &&
               (f.state != WAITING || (same_site(f, fibers[u]) && (f.at_barrier || fibers[u].op == f.op))))
            u++;
        char line[256];
        if (f.state == EXITED) {
            snprintf(line, sizeof(line), "; threads %d-%d have exited", t, u - 1);
        } else {
            snprintf(line, sizeof(line), "; threads %d-%d wait at %s at %s:%d", t, u - 1, f.at_barrier ? "__syncthreads" : op_name(f.op),
                     f.file, f.line);
        }
        out += line;
        shown++;
        t = u;
    }
    return out;
}

// ---- shared memory ----
static std::map<const void*, int> dynamic_shared_limit;

struct Shared {
    Region* region;
    unsigned long poisoned_in;  // the block that last poisoned it
};
static std::map<const void*, Shared> static_shared;  // by declaration
static Shared dynamic_shared;
static unsigned long block_serial;
static size_t static_bytes_this_block;

static void poison(Region* r, size_t element) {
    if (element == 4) {
        uint32_t snan = 0x7fa5a5a5u;
        for (size_t i = 0; i + 4 <= r->bytes; i += 4) memcpy(r->user + i, &snan, 4);
    } else if (element == 8) {
        uint64_t snan = 0x7ff4a5a5a5a5a5a5ull;
        for (size_t i = 0; i + 8 <= r->bytes; i += 8) memcpy(r->user + i, &snan, 8);
    } else {
        memset(r->user, 0xa5, r->bytes);
    }
}

void* emu_shared(size_t bytes, size_t element, const void* key, const char* name) {
    in_kernel("shared memory");
    Shared* s;
    if (!key) {
        s = &dynamic_shared;
        if (!s->region) report("extern __shared__ %s used by a launch that asked for no dynamic shared memory", name);
    } else {
        s = &static_shared[key];
        if (!s->region) {
            char what[160];
            snprintf(what, sizeof(what), "__shared__ %s of kernel %s", name, launch->name);
            s->region = guarded_alloc(bytes, what, false);
        }
        if (s->poisoned_in != block_serial) {  // first use in this block
            static_bytes_this_block += bytes;
            size_t total = static_bytes_this_block + launch->dynamic_shared;
            size_t allowed = dynamic_shared_limit.count(launch->kernel) ? SHARED_OPT_IN_MAX : SHARED_DEFAULT;
            if (total > allowed) {
                report("%zu bytes of static and %zu of dynamic shared memory pass the %zu bytes this block may have",
                       static_bytes_this_block, launch->dynamic_shared, allowed);
            }
        }
    }
    if (s->poisoned_in != block_serial) {
        poison(s->region, element);
        s->poisoned_in = block_serial;
    }
    return s->region->user;
}

// ---- launches ----
static cudaError_t last_error = cudaSuccess;


cudaError_t emu_set_max_dynamic_shared(const void* kernel, int bytes) {
    if (bytes < 0 || bytes > SHARED_OPT_IN_MAX) return cudaErrorInvalidValue;
    dynamic_shared_limit[kernel] = bytes;
    return cudaSuccess;
}

void emu_check_argument(const EmuLaunchConfig& cfg, int index, const void* pointer) {
    if (!pointer || device_region(pointer, 0)) return;
    launch = &cfg;
    report("argument %d is the pointer %p, which is not device memory (a host pointer or freed memory)", index + 1, pointer);
}

static cudaError_t launch_error(const EmuLaunchConfig& cfg) {
    const dim3 &g = cfg.grid, &b = cfg.block;
    if (!b.x || !b.y || !b.z || b.x > 1024 || b.y > 1024 || b.z > 64 || (size_t)b.x * b.y * b.z > 1024) return cudaErrorInvalidConfiguration;
    if (!g.x || !g.y || !g.z || g.x > 2147483647u || g.y > 65535 || g.z > 65535) return cudaErrorInvalidConfiguration;
    auto limit = dynamic_shared_limit.find(cfg.kernel);
    size_t allowed = limit == dynamic_shared_limit.end() ? SHARED_DEFAULT : (size_t)limit->second;
    if (cfg.dynamic_shared > allowed) return cudaErrorInvalidValue;
    return cudaSuccess;
}

void emu_run_grid(const EmuLaunchConfig& cfg, const std::function<void()>& kernel_body) {
    cudaError_t err = launch_error(cfg);
    if (err != cudaSuccess) {
        last_error = err;
        return;
    }
    install_handlers();
    launch = &cfg;
    body = &kernel_body;
    gridDim = cfg.grid;
    blockDim = cfg.block;
    if (cfg.dynamic_shared) {
        char what[160];
        snprintf(what, sizeof(what), "the dynamic shared memory of kernel %s", cfg.name);
        dynamic_shared.region = guarded_alloc(cfg.dynamic_shared, what, false);
    }
    int n = (int)(cfg.block.x * cfg.block.y * cfg.block.z);
    fibers.resize(n);  // each block starts them afresh
    feclearexcept(FE_ALL_EXCEPT);
    feenableexcept(FE_INVALID);
    blocks_running = true;
    for (unsigned bz = 0; bz < cfg.grid.z; bz++) {
        for (unsigned by = 0; by < cfg.grid.y; by++) {
            for (unsigned bx = 0; bx < cfg.grid.x; bx++) {
                blockIdx = dim3(bx, by, bz);
                block_serial++;
                static_bytes_this_block = 0;
                for (int t = 0; t < n; t++) {
                    Fiber& f = fibers[t];
                    f = Fiber();
                    f.idx = dim3(t % cfg.block.x, t / cfg.block.x % cfg.block.y, t / (cfg.block.x * cfg.block.y));
                    f.state = NOT_STARTED;
                }
                for (;;) {
                    for (int t = 0; t < n; t++) {
                        if (fibers[t].state == NOT_STARTED || fibers[t].state == READY) run(&fibers[t]);
                    }
                    running = NULL;
                    if (complete_warp_ops()) continue;
                    int live = 0, at_barrier = 0, exited = 0;
                    const Fiber* first = NULL;
                    for (Fiber& f : fibers) {
                        if (f.state == EXITED) {
                            exited++;
                            continue;
                        }
                        live++;
                        if (f.at_barrier) {
                            at_barrier++;
                            if (!first) first = &f;
                            else if (!same_site(*first, f)) {
                                report("threads of one block wait at different barriers: %s:%d and %s:%d", first->file, first->line,
                                       f.file, f.line);
                            }
                        }
                    }
                    if (!live) break;
                    if (at_barrier < live) report("deadlock: no thread can go on%s", waits().c_str());
                    if (exited) {
                        report("__syncthreads at %s:%d reached by part of the block: %d threads wait there, %d have exited",
                               first->file, first->line, at_barrier, exited);
                    }
                    for (Fiber& f : fibers) f.state = READY;
                }
            }
        }
    }
    blocks_running = false;
    fedisableexcept(FE_INVALID);
    feclearexcept(FE_ALL_EXCEPT);
    if (dynamic_shared.region) guarded_free(dynamic_shared.region);
    dynamic_shared.region = NULL;
    launch = NULL;
    running = NULL;
    threadIdx = blockIdx = dim3(0, 0, 0);
}

// ---- the runtime API ----
static const struct {
    cudaError_t code;
    const char *name, *text;
} ERRORS[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
};
static size_t error_index(cudaError_t err) {
    for (size_t i = 0; i < sizeof(ERRORS) / sizeof(ERRORS[0]); i++) {
        if (ERRORS[i].code == err) return i;
    }
    return 1;
}
const char* cudaGetErrorString(cudaError_t err) { return ERRORS[error_index(err)].text; }
const char* cudaGetErrorName(cudaError_t err) { return ERRORS[error_index(err)].name; }
cudaError_t cudaGetLastError(void) {
    cudaError_t err = last_error;
    last_error = cudaSuccess;
    return err;
}

cudaError_t cudaGetDeviceCount(int* count) {
    *count = 1;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidValue; }

static size_t machine_bytes(void) { return (size_t)sysconf(_SC_PHYS_PAGES) * page_bytes(); }

// An sm_90 device of one multiprocessor at 1 GHz: the emulation's own numbers, never a GPU's
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
    if (device != 0) return cudaErrorInvalidValue;
    memset(prop, 0, sizeof(*prop));
    snprintf(prop->name, sizeof(prop->name), "CPU emulation");
    prop->totalGlobalMem = machine_bytes();
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 1;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
    if (device != 0) return cudaErrorInvalidValue;
    switch (attr) {
        case cudaDevAttrClockRate: *value = 1000000; break;
        case cudaDevAttrMultiProcessorCount: *value = 1; break;
        case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
        case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = SHARED_OPT_IN_MAX; break;
        default: return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
    static char the_pool;
    *pool = (cudaMemPool_t)&the_pool;
    return device == 0 ? cudaSuccess : cudaErrorInvalidValue;
}
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr attr, void*) {
    return attr == cudaMemPoolAttrReleaseThreshold ? cudaSuccess : cudaErrorInvalidValue;
}
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t, cudaMemPoolAttr attr, void* value) {
    if (attr != cudaMemPoolAttrUsedMemHigh) return cudaErrorInvalidValue;
    *(uint64_t*)value = peak_device_bytes;
    return cudaSuccess;
}

cudaError_t cudaMallocAsync(void** ptr, size_t bytes, cudaStream_t) {
    char what[96];
    snprintf(what, sizeof(what), "a device allocation");
    Region* r = guarded_alloc(bytes, what, true);
    if (!r) return cudaErrorMemoryAllocation;
    live_device_bytes += bytes;
    peak_device_bytes = std::max(peak_device_bytes, live_device_bytes);
    *ptr = r->user;
    return cudaSuccess;
}

cudaError_t cudaFreeAsync(void* ptr, cudaStream_t) {
    auto it = regions.find((uintptr_t)ptr);
    if (it == regions.end() || !it->second.device) {
        host_call = "cudaFreeAsync";
        report("%p is not the start of a device allocation", ptr);
    }
    live_device_bytes -= it->second.bytes;
    guarded_free(&it->second);
    return cudaSuccess;
}

// Both ends of a copy must be where its kind says: a host pointer passed as device memory is
// reported here, where a GPU would fault or copy garbage
static void check_side(const char* call, const char* side, const void* p, size_t bytes, bool device) {
    if (!bytes) return;
    bool is_device = device_region(p, bytes) != NULL;
    if (is_device == device) return;
    host_call = call;
    if (device) report("the %s %p (%zu bytes) is not inside one device allocation", side, p, bytes);
    report("the %s %p is device memory, but the copy's kind says host", side, p);
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyDeviceToDevice)
        return cudaErrorInvalidMemcpyDirection;
    check_side("cudaMemcpy", "destination", dst, bytes, kind != cudaMemcpyDeviceToHost);
    check_side("cudaMemcpy", "source", src, bytes, kind != cudaMemcpyHostToDevice);
    if (bytes) memcpy(dst, src, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
    return cudaMemcpy(dst, src, bytes, kind);
}
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t) {
    check_side("cudaMemsetAsync", "destination", ptr, bytes, true);
    if (bytes) memset(ptr, value, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
    *total = machine_bytes();
    *free_bytes = *total - live_device_bytes;
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }

struct EmuEvent {
    double seconds;
};
cudaError_t cudaEventCreate(cudaEvent_t* event) {
    *event = new EmuEvent();
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    event->seconds = ts.tv_sec + ts.tv_nsec * 1e-9;
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop) {
    *ms = (float)((stop->seconds - start->seconds) * 1e3);
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
    delete event;
    return cudaSuccess;
}

// ---- cuBLAS ----
cublasStatus_t cublasCreate(cublasHandle_t* handle) {
    static char the_handle;
    *handle = (cublasHandle_t)&the_handle;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t) {
    return handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}
const char* cublasGetStatusString(cublasStatus_t status) {
    switch (status) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
        default: return "CUBLAS_STATUS_INVALID_VALUE";
    }
}

// A column-major (rows, cols) operand of `element` bytes with leading dimension ld lies inside one
// device allocation
static void check_operand(const char* call, const char* name, const void* p, int rows, int cols, int ld, size_t element) {
    if (!rows || !cols) return;
    size_t bytes = ((size_t)ld * (cols - 1) + rows) * element;
    if (device_region(p, bytes)) return;
    host_call = call;
    report("operand %s (%d x %d, leading dimension %d: %zu bytes from %p) is not inside one device allocation", name, rows, cols, ld,
           bytes, p);
}

// cuBLAS's checks of a product's shape, then of its operands' memory: returns a status other
// than success to give back, or success to compute
static cublasStatus_t check_product(const char* call, cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                    int k, const void* A, int lda, const void* B, int ldb, const void* C, int ldc, size_t ab_element) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    int a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m;
    int b_rows = tb == CUBLAS_OP_N ? k : n, b_cols = tb == CUBLAS_OP_N ? n : k;
    if (m < 0 || n < 0 || k < 0 || lda < std::max(1, a_rows) || ldb < std::max(1, b_rows) || ldc < std::max(1, m))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m && n && k) {
        check_operand(call, "A", A, a_rows, a_cols, lda, ab_element);
        check_operand(call, "B", B, b_rows, b_cols, ldb, ab_element);
    }
    if (m && n) check_operand(call, "C", C, m, n, ldc, sizeof(float));
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* alpha,
                           const float* A, int lda, const float* B, int ldb, const float* beta, float* C, int ldc) {
    cublasStatus_t status = check_product("cublasSgemm", handle, ta, tb, m, n, k, A, lda, B, ldb, C, ldc, sizeof(float));
    if (status != CUBLAS_STATUS_SUCCESS || !m || !n) return status;
    host_call = "cublasSgemm";
    cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, m, n, k,
                *alpha, A, lda, B, ldb, *beta, C, ldc);
    host_call = NULL;
    return CUBLAS_STATUS_SUCCESS;
}

// A column-major bf16 operand widened to fp32, packed (leading dimension rows)
static std::vector<float> widened(const void* p, int rows, int cols, int ld) {
    std::vector<float> out((size_t)rows * cols);
    const __nv_bfloat16* x = (const __nv_bfloat16*)p;
    for (int c = 0; c < cols; c++) {
        for (int r = 0; r < rows; r++) out[(size_t)c * rows + r] = __bfloat162float(x[(size_t)c * ld + r]);
    }
    return out;
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType a_type, int lda, const void* B, cudaDataType b_type, int ldb, const void* beta,
                            void* C, cudaDataType c_type, int ldc, cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    if (a_type != CUDA_R_16BF || b_type != CUDA_R_16BF || c_type != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F || algo != CUBLAS_GEMM_DEFAULT)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    cublasStatus_t status = check_product("cublasGemmEx", handle, ta, tb, m, n, k, A, lda, B, ldb, C, ldc, sizeof(__nv_bfloat16));
    if (status != CUBLAS_STATUS_SUCCESS || !m || !n) return status;
    int a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m;
    int b_rows = tb == CUBLAS_OP_N ? k : n, b_cols = tb == CUBLAS_OP_N ? n : k;
    host_call = "cublasGemmEx";
    std::vector<float> a = widened(A, a_rows, a_cols, lda), b = widened(B, b_rows, b_cols, ldb);
    cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, m, n, k,
                *(const float*)alpha, a.data(), std::max(1, a_rows), b.data(), std::max(1, b_rows), *(const float*)beta, (float*)C, ldc);
    host_call = NULL;
    return CUBLAS_STATUS_SUCCESS;
}

// ---- cuBLAS's batched products: pointer arrays in device memory, one product per entry ----
// Besides each entry's checks, the entries' outputs must not share an element: cuBLAS runs the
// entries concurrently, so two writing one element race (each column of each C an interval)
static void check_batch(const char* call, const void* A, const void* B, const void* C, int count, int m, int n, int ldc) {
    if (count < 0) return;
    const char* names[] = {"A", "B", "C"};
    const void* arrays[] = {A, B, C};
    for (int i = 0; i < 3; i++) {
        if (count && !device_region(arrays[i], (size_t)count * sizeof(void*))) {
            host_call = call;
            report("the pointer array %s (%d entries at %p) is not inside one device allocation", names[i], count, arrays[i]);
        }
    }
    std::vector<std::pair<uintptr_t, int>> columns;  // (first byte, entry)
    for (int i = 0; i < count && m; i++) {
        uintptr_t c = (uintptr_t)((void* const*)C)[i];
        for (int col = 0; col < n; col++) columns.push_back({c + (uintptr_t)col * ldc * sizeof(float), i});
    }
    std::sort(columns.begin(), columns.end());
    for (size_t k = 1; k < columns.size(); k++) {
        if (columns[k].first < columns[k - 1].first + (uintptr_t)m * sizeof(float) && columns[k].second != columns[k - 1].second) {
            host_call = call;
            report("entries %d and %d of the batch write the same output element (at %p): cuBLAS runs them concurrently", columns[k - 1].second,
                   columns[k].second, (void*)columns[k].first);
        }
    }
}

cublasStatus_t cublasSgemmBatched(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* alpha,
                                  const float* const A[], int lda, const float* const B[], int ldb, const float* beta, float* const C[], int ldc,
                                  int count) {
    if (count < 0) return CUBLAS_STATUS_INVALID_VALUE;
    check_batch("cublasSgemmBatched", A, B, C, count, m, n, ldc);
    for (int i = 0; i < count; i++) {
        cublasStatus_t status = cublasSgemm(handle, ta, tb, m, n, k, alpha, A[i], lda, B[i], ldb, beta, C[i], ldc);
        if (status != CUBLAS_STATUS_SUCCESS) return status;
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmBatchedEx(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* alpha,
                                   const void* const A[], cudaDataType a_type, int lda, const void* const B[], cudaDataType b_type, int ldb,
                                   const void* beta, void* const C[], cudaDataType c_type, int ldc, int count, cublasComputeType_t compute,
                                   cublasGemmAlgo_t algo) {
    if (count < 0) return CUBLAS_STATUS_INVALID_VALUE;
    check_batch("cublasGemmBatchedEx", A, B, C, count, m, n, ldc);
    for (int i = 0; i < count; i++) {
        cublasStatus_t status = cublasGemmEx(handle, ta, tb, m, n, k, alpha, A[i], a_type, lda, B[i], b_type, ldb, beta, C[i], c_type, ldc,
                                             compute, algo);
        if (status != CUBLAS_STATUS_SUCCESS) return status;
    }
    return CUBLAS_STATUS_SUCCESS;
}
