// pdc resident ring kernel: the library's loop around a user's CUDA C device function.
//
// Rendered by pdc_cuda._ring_source.render_ring_kernel(): every marker below (a name
// between double at-signs) is replaced before NVRTC sees the source. The offsets come from
// pdc_core.backend.Offset, so the layout has one source of truth (docs/ring-protocol.md).
//
// One thread block serves one ring region. Thread 0 polls the host-written words with
// system-scope acquire loads (ld.acquire.sys), backing off with __nanosleep while
// idle; the block processes a run of requests in parallel (one request per thread,
// strided); every thread fences its reply stores at system scope, the block meets at
// a barrier, and thread 0 publishes OUT_HEAD then IN_TAIL with system-scope release
// stores (st.release.sys). No read-modify-write ever touches the mapped region.

#include <cuda/atomic>

typedef unsigned long long pdc_u64;
typedef unsigned int pdc_u32;

// ---- control block (generated from pdc_core.backend) ------------------------------
@@OFFSETS@@

// ---- record layouts (generated from the NumPy record dtypes) -----------------------
@@PRELUDE@@
@@REQUEST_STRUCT@@
@@REPLY_STRUCT@@
@@STATE_STRUCT@@
@@REQUEST_LAYOUT_CHECK@@
@@REPLY_LAYOUT_CHECK@@

#define PDC_BACKOFF_MIN_NS @@BACKOFF_MIN_NS@@
#define PDC_BACKOFF_MAX_NS @@BACKOFF_MAX_NS@@
#define PDC_MAX_BATCH @@MAX_BATCH@@ull

// ---- the user's device function ------------------------------------------------------
// Contract: __device__ int @@BODY@@(const pdc_request& request, pdc_reply& reply);
// or, for a kernel with state, ...(const pdc_request&, pdc_reply&, pdc_state* state),
// where state points to the kernel's device-resident state array (shared by all the
// threads: update it with atomics). Called once per request, by one thread of the
// block, requests of a batch in parallel; return 0 on success, or an error code
// (1 = generic body error, 256 and up = codes of your own) to crash the kernel: the
// host then raises PersistentKernelError, surfaced to callers as ActorCrashed.
#line 1 "@@BODY_FILENAME@@"
@@USER_SOURCE@@
#line @@TEMPLATE_LINE@@ "pdc_ring_kernel.cu"

namespace pdc {

typedef cuda::atomic_ref<pdc_u64, cuda::thread_scope_system> sys_u64;
typedef cuda::atomic_ref<pdc_u32, cuda::thread_scope_system> sys_u32;

__device__ __forceinline__ pdc_u64* word64(unsigned char* region, pdc_u64 offset) {
    return reinterpret_cast<pdc_u64*>(region + offset);
}

__device__ __forceinline__ pdc_u32* word32(unsigned char* region, pdc_u64 offset) {
    return reinterpret_cast<pdc_u32*>(region + offset);
}

__device__ __forceinline__ pdc_u64 load_acquire64(unsigned char* region, pdc_u64 offset) {
    return sys_u64(*word64(region, offset)).load(cuda::memory_order_acquire);
}

__device__ __forceinline__ pdc_u32 load_acquire32(unsigned char* region, pdc_u64 offset) {
    return sys_u32(*word32(region, offset)).load(cuda::memory_order_acquire);
}

__device__ __forceinline__ void store_release64(unsigned char* region, pdc_u64 offset,
                                                pdc_u64 value) {
    sys_u64(*word64(region, offset)).store(value, cuda::memory_order_release);
}

__device__ __forceinline__ void store_release32(unsigned char* region, pdc_u64 offset,
                                                pdc_u32 value) {
    sys_u32(*word32(region, offset)).store(value, cuda::memory_order_release);
}

__device__ __forceinline__ pdc_u64 min64(pdc_u64 a, pdc_u64 b) { return a < b ? a : b; }

// Append text (and optionally a decimal number) to the error message being built.
__device__ pdc_u32 put_text(unsigned char* dst, pdc_u32 at, const char* text) {
    while (*text && at < PDC_ERROR_MESSAGE_SIZE) dst[at++] = static_cast<unsigned char>(*text++);
    return at;
}

__device__ pdc_u32 put_number(unsigned char* dst, pdc_u32 at, pdc_u64 value) {
    char digits[24];
    int n = 0;
    do {
        digits[n++] = static_cast<char>('0' + value % 10);
        value /= 10;
    } while (value && n < 24);
    while (n > 0 && at < PDC_ERROR_MESSAGE_SIZE) dst[at++] = static_cast<unsigned char>(digits[--n]);
    return at;
}

// Message and length first (plain stores), then the code with a release store: a host
// that sees the code also sees the message.
__device__ void report_error(unsigned char* region, pdc_u32 code, const char* text,
                             const char* text2, pdc_u64 number, bool with_number) {
    unsigned char* message = region + PDC_OFF_ERROR_MESSAGE;
    pdc_u32 length = put_text(message, 0, text);
    if (with_number) length = put_number(message, length, number);
    if (text2) length = put_text(message, length, text2);
    *word32(region, PDC_OFF_ERROR_LENGTH) = length;
    store_release32(region, PDC_OFF_ERROR_CODE, code);
}

enum Command : pdc_u32 { WORK = 0, EXIT = 1 };

}  // namespace pdc

extern "C" __global__ void __launch_bounds__(1024) pdc_ring_kernel(unsigned char* region,
                                                                  pdc_state* state) {
    using namespace pdc;
    // Written by thread 0 only while the rest of the block waits at a barrier; read by
    // everyone between the two barriers of an iteration.
    __shared__ pdc_u64 s_first;     // index of the first request of the run
    __shared__ pdc_u64 s_count;     // requests in the run
    __shared__ pdc_u64 s_out;       // out_head when the run started
    __shared__ pdc_u64 s_in_cap, s_out_cap, s_in_ring, s_out_ring;  // the header
    __shared__ pdc_u32 s_command;   // WORK or EXIT
    __shared__ pdc_u32 s_error;     // first body error code of the run (0: none)
    __shared__ pdc_u64 s_error_at;  // request index of that error

    // Indices this kernel owns, and its cache of OUT_TAIL: thread 0 only.
    pdc_u64 in_tail = 0, out_head = 0, out_tail = 0, batches = 0;
    pdc_u32 backoff = PDC_BACKOFF_MIN_NS;
    bool paused = false;

    if (threadIdx.x == 0) {
        s_command = WORK;
        const pdc_u32 magic = *word32(region, PDC_OFF_MAGIC);
        const pdc_u32 version = *word32(region, PDC_OFF_VERSION);
        s_in_cap = *word64(region, PDC_OFF_IN_CAPACITY);
        s_out_cap = *word64(region, PDC_OFF_OUT_CAPACITY);
        s_in_ring = *word64(region, PDC_OFF_IN_RING);
        s_out_ring = *word64(region, PDC_OFF_OUT_RING);
        const pdc_u64 in_slot = *word64(region, PDC_OFF_IN_SLOT_SIZE);
        const pdc_u64 out_slot = *word64(region, PDC_OFF_OUT_SLOT_SIZE);
        const pdc_u32 bad_request = pdc_request_layout_mismatch();
        const pdc_u32 bad_reply = pdc_reply_layout_mismatch();
        if (magic != PDC_RING_MAGIC || version != PDC_RING_VERSION) {
            report_error(region, PDC_ERROR_PROTOCOL, "bad ring header: magic or version ", 0,
                         version, true);
            s_command = EXIT;
        } else if (in_slot != sizeof(pdc_request) || out_slot != sizeof(pdc_reply)) {
            report_error(region, PDC_ERROR_PROTOCOL,
                         "slot sizes in the ring header do not match the compiled records; "
                         "input slot bytes ", 0, in_slot, true);
            s_command = EXIT;
        } else if (s_in_cap == 0 || s_out_cap == 0) {
            report_error(region, PDC_ERROR_PROTOCOL, "a ring has zero capacity", 0, 0, false);
            s_command = EXIT;
        } else if (bad_request || bad_reply) {
            report_error(region, PDC_ERROR_PROTOCOL,
                         "the compiled record layout differs from the NumPy dtype at field #",
                         bad_request ? " of the request" : " of the reply",
                         bad_request ? bad_request : bad_reply, true);
            s_command = EXIT;
        } else {
            in_tail = *word64(region, PDC_OFF_IN_TAIL);
            out_head = *word64(region, PDC_OFF_OUT_HEAD);
            out_tail = *word64(region, PDC_OFF_OUT_TAIL);
            batches = *word64(region, PDC_OFF_BATCHES);
            store_release32(region, PDC_OFF_STARTED, 1u);
        }
    }

    for (;;) {
        if (threadIdx.x == 0 && s_command == WORK) {
            // Wait for work, a stop or a pause; only thread 0 touches the control block.
            // STOP and PAUSE are loaded relaxed *before* the acquire load of IN_HEAD, so
            // the three loads cross PCIe together: one round trip per poll.
            for (;;) {
                const pdc_u32 stop = sys_u32(*word32(region, PDC_OFF_STOP))
                                         .load(cuda::memory_order_relaxed);
                const pdc_u32 pause_word = sys_u32(*word32(region, PDC_OFF_PAUSE))
                                               .load(cuda::memory_order_relaxed);
                const pdc_u64 in_head = load_acquire64(region, PDC_OFF_IN_HEAD);
                if (stop == PDC_STOP_NOW) {
                    s_command = EXIT;
                    break;
                }
                if (stop != PDC_STOP_RUN && stop != PDC_STOP_DRAIN) {
                    report_error(region, PDC_ERROR_PROTOCOL, "the STOP word holds ", 0, stop,
                                 true);
                    s_command = EXIT;
                    break;
                }
                const bool pause = stop == PDC_STOP_RUN && pause_word != 0u;
                if (pause != paused) {
                    paused = pause;
                    store_release32(region, PDC_OFF_PAUSED, pause ? 1u : 0u);
                }
                if (paused) {
                    __nanosleep(PDC_BACKOFF_MAX_NS);
                    continue;
                }
                if (in_head < in_tail || in_head - in_tail > s_in_cap) {
                    report_error(region, PDC_ERROR_PROTOCOL, "in_head moved to ",
                                 " outside [in_tail, in_tail + capacity]", in_head, true);
                    s_command = EXIT;
                    break;
                }
                pdc_u64 count = in_head - in_tail;
                pdc_u64 space = s_out_cap - (out_head - out_tail);
                if (count != 0 && space == 0) {  // reload the host's OUT_TAIL only now
                    out_tail = load_acquire64(region, PDC_OFF_OUT_TAIL);
                    if (out_tail > out_head || out_head - out_tail > s_out_cap) {
                        report_error(region, PDC_ERROR_PROTOCOL, "out_tail moved to ",
                                     " outside [out_head - capacity, out_head]", out_tail, true);
                        s_command = EXIT;
                        break;
                    }
                    space = s_out_cap - (out_head - out_tail);
                }
                if (count == 0 || space == 0) {
                    if (count == 0 && stop == PDC_STOP_DRAIN && in_tail == out_head) {
                        // STOP was loaded (relaxed) before IN_HEAD, so this IN_HEAD may
                        // predate requests the host published before storing DRAIN. The
                        // fence orders the STOP load before a fresh acquire of IN_HEAD;
                        // exit only if that one shows nothing new either.
                        cuda::atomic_thread_fence(cuda::memory_order_acquire,
                                                  cuda::thread_scope_system);
                        if (load_acquire64(region, PDC_OFF_IN_HEAD) == in_tail) {
                            s_command = EXIT;  // every published request answered
                            break;
                        }
                        continue;
                    }
                    if (backoff) __nanosleep(backoff);
                    backoff = backoff * 2 > PDC_BACKOFF_MAX_NS ? PDC_BACKOFF_MAX_NS : backoff * 2;
                    if (backoff == 0) backoff = PDC_BACKOFF_MIN_NS;
                    continue;
                }
                count = min64(count, space);
                count = min64(count, s_in_cap - in_tail % s_in_cap);
                count = min64(count, s_out_cap - out_head % s_out_cap);
                count = min64(count, PDC_MAX_BATCH);
                s_first = in_tail;
                s_count = count;
                s_out = out_head;
                s_error = 0u;
                backoff = PDC_BACKOFF_MIN_NS;
                break;
            }
        }
        __syncthreads();  // barrier 1: the run (or EXIT) is decided
        if (s_command != WORK) break;

        // Every thread: order its slot loads after thread 0's acquire of IN_HEAD.
        cuda::atomic_thread_fence(cuda::memory_order_acquire, cuda::thread_scope_system);
        const pdc_u64 first = s_first, count = s_count;
        const pdc_request* requests =
            reinterpret_cast<const pdc_request*>(region + s_in_ring) + first % s_in_cap;
        pdc_reply* replies = reinterpret_cast<pdc_reply*>(region + s_out_ring) + s_out % s_out_cap;
        for (pdc_u64 i = threadIdx.x; i < count; i += blockDim.x) {
            const int code = @@BODY@@(requests[i], replies[i]@@STATE_ARG@@);
            if (code != 0) {
                // Shared-memory CAS (block scope): never on the mapped region.
                if (atomicCAS(&s_error, 0u, static_cast<pdc_u32>(code)) == 0u) {
                    s_error_at = first + i;
                }
            }
        }
        // Every thread: its reply stores become visible system-wide before the barrier.
        cuda::atomic_thread_fence(cuda::memory_order_release, cuda::thread_scope_system);
        __syncthreads();  // barrier 2: every reply of the run is written and fenced

        if (threadIdx.x == 0) {
            if (s_error != 0u) {
                report_error(region, s_error, "the kernel body returned an error for request #",
                             0, s_error_at, true);
                s_command = EXIT;  // seen by everyone after the next barrier 1
            } else {
                out_head += count;
                in_tail += count;
                batches += 1;
                store_release64(region, PDC_OFF_OUT_HEAD, out_head);  // replies first
                store_release64(region, PDC_OFF_IN_TAIL, in_tail);    // then free the slots
                sys_u64(*word64(region, PDC_OFF_BATCHES))
                    .store(batches, cuda::memory_order_relaxed);
            }
        }
    }

    if (threadIdx.x == 0) {
        if (paused) store_release32(region, PDC_OFF_PAUSED, 0u);
        store_release32(region, PDC_OFF_DONE, 1u);  // the last store to the region
    }
}
