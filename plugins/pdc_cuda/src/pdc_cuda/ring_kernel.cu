// pdc resident ring kernel: the library's loop around a user's CUDA C device function.
//
// Rendered by pdc_cuda._ring_source.render_ring_kernel(): every marker below (a name
// between double at-signs) is replaced before NVRTC sees the source. The offsets come from
// pdc_core.backend.Offset, so the layout has one source of truth (docs/ring-protocol.md).
//
// One thread block serves one ring region (its *input region*) and writes its replies
// into an *output ring*: the same region's output ring for a kernel of its own, or, for
// a stage of a pipeline (ring-protocol.md section 11), the next stage's input ring (a
// link: this kernel is that ring's host) or the host region's output ring (the last
// stage). Thread 0 polls the words of the other side with acquire loads, backing off
// with __nanosleep while idle; the block processes a run of requests in parallel (one
// request per thread, strided; larger records staged by the whole block, see "staging");
// the block meets at a barrier, and thread 0 publishes
// the replies' head, then the input ring's IN_TAIL, with release stores. The scope of
// every ordered access is the scope of the region it touches: system for regions in
// mapped host memory (the host, or a stage on another device, is the other side),
// device for links in this device's memory. No read-modify-write ever touches a region.
//
// Memory ordering (ring-protocol.md section 5): each ordering point below says what it
// orders and why, and nothing is ordered that need not be. The block's other threads
// need no fences of their own: __syncthreads() synchronizes every thread of the block
// with thread 0 (PTX: bar.sync synchronizes with bar.sync on the same barrier), and
// PTX's release and acquire are cumulative along causality order, so thread 0's
// acquire load before barrier 1 orders every thread's request loads after it, and
// thread 0's release store after barrier 2 orders every thread's reply stores before it.

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
// pdc_zero_padding(pdc_reply&): zeroes the reply's padding bytes (none: does nothing).
@@REPLY_ZERO_PADDING@@
@@REQUEST_LAYOUT_CHECK@@
@@REPLY_LAYOUT_CHECK@@

#define PDC_BACKOFF_MIN_NS @@BACKOFF_MIN_NS@@
#define PDC_BACKOFF_MAX_NS @@BACKOFF_MAX_NS@@
#define PDC_MAX_BATCH @@MAX_BATCH@@ull

// ---- how this kernel is wired (generated from pdc_cuda._ring_source.RingWiring) -----
// Scope of the words of the input region, and of the region the output ring is in.
#define PDC_IN_SCOPE @@IN_SCOPE@@
#define PDC_OUT_SCOPE @@OUT_SCOPE@@
// 1: the output ring is the next stage's input ring (a link; this kernel is its host).
#define PDC_OUT_LINK @@OUT_LINK@@
// Every error message starts with this (a pipeline stage's "stage <i> ('<name>'): ").
#define PDC_STAGE_PREFIX @@STAGE_PREFIX@@
// The input ring's layout (RingLayout): its FEATURES word, bytes per slot, and with
// sequenced slots (ring-protocol.md section 12) where a slot's sequence word is.
#define PDC_IN_FEATURES @@IN_FEATURES@@u
#define PDC_IN_SEQUENCED @@IN_SEQUENCED@@
#define PDC_IN_SLOT_SIZE @@IN_SLOT_SIZE@@ull
#define PDC_IN_SEQUENCE_OFFSET @@IN_SEQUENCE_OFFSET@@ull

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

// The words of one region, accessed at one scope.
template <cuda::thread_scope Scope>
struct Words {
    unsigned char* base;

    // Plain access to a word: only for words no other agent stores while this kernel
    // runs (the header, written before the launch, which orders it before every load
    // of the kernel; words only this kernel stores), or for words read after an acquire
    // that orders their stores before (the next stage's error words after its DONE).
    // Each use says which. A word another agent may store concurrently is loaded with
    // load_relaxed*/load_acquire*: a plain load racing with a store is a data race in
    // the PTX memory model as in C++'s.
    __device__ pdc_u64& word64(pdc_u64 offset) const {
        return *reinterpret_cast<pdc_u64*>(base + offset);
    }
    __device__ pdc_u32& word32(pdc_u64 offset) const {
        return *reinterpret_cast<pdc_u32*>(base + offset);
    }
    __device__ pdc_u64 load_acquire64(pdc_u64 offset) const {
        return cuda::atomic_ref<pdc_u64, Scope>(word64(offset)).load(cuda::memory_order_acquire);
    }
    __device__ pdc_u64 load_relaxed64(pdc_u64 offset) const {
        return cuda::atomic_ref<pdc_u64, Scope>(word64(offset)).load(cuda::memory_order_relaxed);
    }
    __device__ pdc_u32 load_acquire32(pdc_u64 offset) const {
        return cuda::atomic_ref<pdc_u32, Scope>(word32(offset)).load(cuda::memory_order_acquire);
    }
    __device__ pdc_u32 load_relaxed32(pdc_u64 offset) const {
        return cuda::atomic_ref<pdc_u32, Scope>(word32(offset)).load(cuda::memory_order_relaxed);
    }
    __device__ void store_release64(pdc_u64 offset, pdc_u64 value) const {
        cuda::atomic_ref<pdc_u64, Scope>(word64(offset)).store(value, cuda::memory_order_release);
    }
    __device__ void store_release32(pdc_u64 offset, pdc_u32 value) const {
        cuda::atomic_ref<pdc_u32, Scope>(word32(offset)).store(value, cuda::memory_order_release);
    }
    __device__ void store_relaxed64(pdc_u64 offset, pdc_u64 value) const {
        cuda::atomic_ref<pdc_u64, Scope>(word64(offset)).store(value, cuda::memory_order_relaxed);
    }
    __device__ void store_relaxed32(pdc_u64 offset, pdc_u32 value) const {
        cuda::atomic_ref<pdc_u32, Scope>(word32(offset)).store(value, cuda::memory_order_relaxed);
    }
};

typedef Words<PDC_IN_SCOPE> InWords;
typedef Words<PDC_OUT_SCOPE> OutWords;

// The output ring's words: a link is the next stage's input ring, of which this kernel
// is the host (IN_HEAD is ours, IN_TAIL theirs); otherwise it is an output ring, of
// which this kernel is the device (OUT_HEAD ours, OUT_TAIL the host's).
#if PDC_OUT_LINK
#define PDC_OUT_HEAD_WORD PDC_OFF_IN_HEAD
#define PDC_OUT_TAIL_WORD PDC_OFF_IN_TAIL
#define PDC_OUT_CAPACITY_WORD PDC_OFF_IN_CAPACITY
#define PDC_OUT_SLOT_WORD PDC_OFF_IN_SLOT_SIZE
#define PDC_OUT_RING_WORD PDC_OFF_IN_RING
#else
#define PDC_OUT_HEAD_WORD PDC_OFF_OUT_HEAD
#define PDC_OUT_TAIL_WORD PDC_OFF_OUT_TAIL
#define PDC_OUT_CAPACITY_WORD PDC_OFF_OUT_CAPACITY
#define PDC_OUT_SLOT_WORD PDC_OFF_OUT_SLOT_SIZE
#define PDC_OUT_RING_WORD PDC_OFF_OUT_RING
#endif

static_assert(PDC_IN_SLOT_SIZE >= sizeof(pdc_request), "an input slot holds a request");

__device__ __forceinline__ pdc_u64 min64(pdc_u64 a, pdc_u64 b) { return a < b ? a : b; }

// ---- staging: the block copies a run's records together -------------------------------
// A thread reading its own record from mapped memory pays a bus round trip per load, so a
// large record costs what one thread's serial loads cost. Staged, the block copies the
// run's requests (whole slots, contiguous: a run never wraps) into a stage with every
// thread and 16-byte loads, runs the bodies on the copies, and copies the replies out the
// same way, all before barrier 2 (so before thread 0 publishes the heads). The stage is
// shared memory, or for a record too large for it a device-heap buffer taken at start-up
// (in place if that allocation fails). A slot and a reply of at most 16 bytes each are
// read and written in place by default: one load per thread, already coalesced across a
// warp. -DPDC_STAGE=0 or =1 (a compile option) forces either way.
#ifndef PDC_STAGE
#define PDC_STAGE (PDC_IN_SLOT_SIZE > 16 || sizeof(pdc_reply) > 16)
#endif
#define PDC_STAGE_SHARED_BYTES 32768ull
// Room a stage needs beyond its records: each of the two areas starts on the 16-byte
// phase of the ring address it copies (so the records keep their alignment).
#define PDC_STAGE_SLACK 64ull
#define PDC_STAGE_RECORD (PDC_IN_SLOT_SIZE + sizeof(pdc_reply))
// A record that does not fit the shared stage gets a heap stage of up to 1 MiB (or one
// record, if larger), no more records than a run holds.
#define PDC_STAGE_HEAP_RECORDS \
    (PDC_STAGE_RECORD >= (1ull << 20) ? 1ull : min64(PDC_MAX_BATCH, (1ull << 20) / PDC_STAGE_RECORD))

struct alignas(16) pdc_u128 {
    pdc_u64 lo, hi;
};

// Copy n bytes from src to dst with every thread of the block, 16 bytes per load where
// both are 16-byte aligned; dst and src must have the same address modulo 16. Plain
// loads and stores: the caller's barriers order them (see the top of the file).
__device__ void block_copy(unsigned char* dst, const unsigned char* src, pdc_u64 n) {
    const pdc_u64 misaligned = reinterpret_cast<pdc_u64>(src) & 15ull;
    const pdc_u64 head = min64(n, misaligned ? 16ull - misaligned : 0ull);
    const pdc_u64 wide = (n - head) / 16ull;
    for (pdc_u64 i = threadIdx.x; i < head; i += blockDim.x) dst[i] = src[i];
    const pdc_u128* from = reinterpret_cast<const pdc_u128*>(src + head);
    pdc_u128* to = reinterpret_cast<pdc_u128*>(dst + head);
    for (pdc_u64 i = threadIdx.x; i < wide; i += blockDim.x) to[i] = from[i];
    for (pdc_u64 i = head + wide * 16ull + threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

// Where an area of the stage starts: after `from`, on the 16-byte phase of `ring`.
__device__ __forceinline__ unsigned char* stage_area(unsigned char* from, const unsigned char* ring) {
    unsigned char* base = from + ((16ull - (reinterpret_cast<pdc_u64>(from) & 15ull)) & 15ull);
    return base + (reinterpret_cast<pdc_u64>(ring) & 15ull);
}

// Offset of request `index`'s slot, and of its sequence word, from the region's start.
__device__ __forceinline__ pdc_u64 in_slot(pdc_u64 ring, pdc_u64 capacity, pdc_u64 index) {
    return ring + (index % capacity) * PDC_IN_SLOT_SIZE;
}

// The sequence word request `index`'s slot holds until the request is stored: the
// word of the request a lap before (0 on the first lap).
__device__ __forceinline__ pdc_u64 previous_sequence(pdc_u64 capacity, pdc_u64 index) {
    return index >= capacity ? index + 1 - capacity : 0;
}

// Sleep with a doubling back-off between min and max; returns the next delay.
__device__ __forceinline__ pdc_u32 back_off(pdc_u32 delay) {
    if (delay) __nanosleep(delay);
    const pdc_u32 next = delay * 2 > PDC_BACKOFF_MAX_NS ? PDC_BACKOFF_MAX_NS : delay * 2;
    return next ? next : PDC_BACKOFF_MIN_NS;
}

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

// The length of text[0:length] without a UTF-8 character cut at its end.
__device__ pdc_u32 whole_characters(const unsigned char* text, pdc_u32 length) {
    pdc_u32 start = length;
    int continuation = 0;
    while (start > 0 && continuation < 3 && (text[start - 1] & 0xC0u) == 0x80u) {
        --start;
        ++continuation;
    }
    if (start == 0) return length;
    const unsigned char lead = text[start - 1];
    const int needed = lead >= 0xF0u ? 3 : lead >= 0xE0u ? 2 : lead >= 0xC0u ? 1 : 0;
    return needed > continuation ? start - 1 : length;
}

// Message and length first (plain stores), then the code with a release store: a host
// that sees the code -- at any time, not only after DONE -- also sees the message.
__device__ void report_error(const InWords& in, pdc_u32 code, const char* text,
                             const char* text2, pdc_u64 number, bool with_number) {
    unsigned char* message = in.base + PDC_OFF_ERROR_MESSAGE;
    pdc_u32 length = put_text(message, 0, PDC_STAGE_PREFIX);
    length = put_text(message, length, text);
    if (with_number) length = put_number(message, length, number);
    if (text2) length = put_text(message, length, text2);
    // Plain store: the release of ERROR_CODE below publishes it (and the message).
    in.word32(PDC_OFF_ERROR_LENGTH) = whole_characters(message, length);
    in.store_release32(PDC_OFF_ERROR_CODE, code);
}

#if PDC_OUT_LINK
// The next stage failed first: its error words (which already name it) become ours.
// Called after an acquire load of its DONE, which its error words precede.
__device__ void adopt_error(const InWords& in, const OutWords& out) {
    // Plain: the next stage stored its error words before its DONE (release), and the
    // caller acquired that DONE; it stores nothing after it.
    const pdc_u32 code = out.word32(PDC_OFF_ERROR_CODE);
    if (code == 0u) return;
    pdc_u32 length = out.word32(PDC_OFF_ERROR_LENGTH);
    if (length > PDC_ERROR_MESSAGE_SIZE) length = PDC_ERROR_MESSAGE_SIZE;
    for (pdc_u32 i = 0; i < length; ++i) {
        in.base[PDC_OFF_ERROR_MESSAGE + i] = out.base[PDC_OFF_ERROR_MESSAGE + i];
    }
    in.word32(PDC_OFF_ERROR_LENGTH) = length;  // plain: the release below publishes it
    in.store_release32(PDC_OFF_ERROR_CODE, code);
}
#endif

enum Command : pdc_u32 { WORK = 0, EXIT = 1 };

// Check both regions' headers against what this kernel was compiled for; on a
// mismatch report it (PROTOCOL) and return false.
// Plain loads: every word read here is header, written before the launch and never
// after.
__device__ bool check_headers(const InWords& in, const OutWords& out) {
    const pdc_u32 bad_request = pdc_request_layout_mismatch();
    const pdc_u32 bad_reply = pdc_reply_layout_mismatch();
    const pdc_u32 in_version = in.word32(PDC_OFF_VERSION);
    const pdc_u32 out_version = out.word32(PDC_OFF_VERSION);
    if (in.word32(PDC_OFF_MAGIC) != PDC_RING_MAGIC || in_version != PDC_RING_VERSION ||
        out.word32(PDC_OFF_MAGIC) != PDC_RING_MAGIC || out_version != PDC_RING_VERSION) {
        report_error(in, PDC_ERROR_PROTOCOL, "bad ring header: magic or version ", 0,
                     in_version != PDC_RING_VERSION ? in_version : out_version, true);
        return false;
    }
    const pdc_u32 in_features = in.word32(PDC_OFF_FEATURES);
    const pdc_u32 out_features = out.word32(PDC_OFF_FEATURES);
    if (in_features != PDC_IN_FEATURES || (PDC_OUT_LINK && out_features != 0u)) {
        report_error(in, PDC_ERROR_PROTOCOL,
                     "the ring header's FEATURES word differs from the compiled layout: ", 0,
                     in_features != PDC_IN_FEATURES ? in_features : out_features, true);
        return false;
    }
    const pdc_u64 in_slot = in.word64(PDC_OFF_IN_SLOT_SIZE);
    if (in_slot != PDC_IN_SLOT_SIZE) {
        report_error(in, PDC_ERROR_PROTOCOL,
                     "slot sizes in the ring header do not match the compiled records; "
                     "input slot bytes ", 0, in_slot, true);
        return false;
    }
    const pdc_u64 out_slot = out.word64(PDC_OUT_SLOT_WORD);
    if (out_slot != sizeof(pdc_reply)) {
        report_error(in, PDC_ERROR_PROTOCOL,
                     "slot sizes in the ring header do not match the compiled records; "
                     "output slot bytes ", 0, out_slot, true);
        return false;
    }
    if (in.word64(PDC_OFF_IN_CAPACITY) == 0 || out.word64(PDC_OUT_CAPACITY_WORD) == 0) {
        report_error(in, PDC_ERROR_PROTOCOL, "a ring has zero capacity", 0, 0, false);
        return false;
    }
    if (bad_request || bad_reply) {
        report_error(in, PDC_ERROR_PROTOCOL,
                     "the compiled record layout differs from the NumPy dtype at field #",
                     bad_request ? " of the request" : " of the reply",
                     bad_request ? bad_request : bad_reply, true);
        return false;
    }
    return true;
}

}  // namespace pdc

extern "C" __global__ void __launch_bounds__(1024)
pdc_ring_kernel(unsigned char* in_region, unsigned char* out_region, pdc_state* state) {
    using namespace pdc;
    const InWords in{in_region};
    const OutWords out{out_region};
    // Written by thread 0 only while the rest of the block waits at a barrier; read by
    // everyone between the two barriers of an iteration.
    __shared__ pdc_u64 s_first;     // index of the first request of the run
    __shared__ pdc_u64 s_count;     // requests in the run
    __shared__ pdc_u64 s_out;       // head of the output ring when the run started
    __shared__ pdc_u64 s_in_cap, s_out_cap, s_in_ring, s_out_ring;  // the headers
    // Thread 0's decision, handed to the block: thread 0 stores it just before barrier
    // 1 only, and every thread loads it between barriers 1 and 2 only (racecheck: no
    // other access, whatever the compiler hoists). Thread 0 decides from `command`, its
    // own register copy, never from this word.
    __shared__ pdc_u32 s_command;   // WORK or EXIT
    __shared__ pdc_u32 s_error;     // first error code of the run (0: none)
    __shared__ pdc_u64 s_error_at;  // request index of that error
    __shared__ pdc_u32 s_sequence_error;  // that error is a bad sequence word, not the body's
    // The stage (see "staging" above): the shared buffer, a heap buffer, or null (in
    // place); and how many records it holds. Set by thread 0 before the first barrier.
    __shared__ pdc_u128 s_stage_words[PDC_STAGE ? PDC_STAGE_SHARED_BYTES / 16 : 1];  // aligned
    __shared__ unsigned char* s_stage;
    __shared__ pdc_u64 s_stage_records;
#if PDC_IN_SEQUENCED
    __shared__ pdc_u32 s_first_acquired;  // thread 0 acquired the first request's sequence word
#endif

    // Indices this kernel owns, and its cache of the output ring's tail: thread 0 only.
    pdc_u64 in_tail = 0, out_head = 0, out_tail = 0, batches = 0;
#if PDC_IN_SEQUENCED
    pdc_u64 in_head_seen = 0;  // the largest IN_HEAD loaded: it may lag behind in_tail
#endif
    pdc_u32 backoff = PDC_BACKOFF_MIN_NS;
    bool paused = false;
    pdc_u32 command = WORK;  // thread 0's: WORK until it decides to leave

    if (threadIdx.x == 0) {
        s_stage = nullptr;
        s_stage_records = 0;
        if (PDC_STAGE) {
            if (PDC_STAGE_RECORD + PDC_STAGE_SLACK <= PDC_STAGE_SHARED_BYTES) {
                s_stage = reinterpret_cast<unsigned char*>(s_stage_words);
                s_stage_records = (PDC_STAGE_SHARED_BYTES - PDC_STAGE_SLACK) / PDC_STAGE_RECORD;
            } else {
                const pdc_u64 records = PDC_STAGE_HEAP_RECORDS;
                s_stage = static_cast<unsigned char*>(
                    malloc(records * PDC_STAGE_RECORD + PDC_STAGE_SLACK));
                s_stage_records = s_stage ? records : 0;  // null: in place
            }
        }
        if (!check_headers(in, out)) {
            command = EXIT;
        } else {
            // Plain: header words, written before the launch and never after.
            s_in_cap = in.word64(PDC_OFF_IN_CAPACITY);
            s_out_cap = out.word64(PDC_OUT_CAPACITY_WORD);
            s_in_ring = in.word64(PDC_OFF_IN_RING);
            s_out_ring = out.word64(PDC_OUT_RING_WORD);
            // Plain: IN_TAIL, the output ring's head and BATCHES are stored by this
            // kernel only (their first value was written before the launch).
            in_tail = in.word64(PDC_OFF_IN_TAIL);
            out_head = out.word64(PDC_OUT_HEAD_WORD);
            batches = in.word64(PDC_OFF_BATCHES);
#if PDC_IN_SEQUENCED
            // Relaxed: the host may be storing IN_HEAD already (a sequenced ring's
            // requests may be published before STARTED); it only bounds the run.
            in_head_seen = in.load_relaxed64(PDC_OFF_IN_HEAD);
#endif
            // Relaxed: the output ring's tail belongs to its reader (the host, or the
            // next stage), which stores it concurrently once replies flow; the value
            // is only a lower bound, reloaded with acquire before any slot is reused.
            out_tail = out.load_relaxed64(PDC_OUT_TAIL_WORD);
#if PDC_OUT_LINK
            // STARTED only once the next stage is resident (or has given up, or a stop
            // NOW came): stage 0's STARTED then means every stage is. Relaxed: these
            // words are signals, nothing read later depends on them (a next stage's
            // error words are read only after the acquire of its DONE, on the way out).
            pdc_u32 delay = PDC_BACKOFF_MIN_NS;
            while (out.load_relaxed32(PDC_OFF_STARTED) == 0u &&
                   out.load_relaxed32(PDC_OFF_DONE) == 0u &&
                   in.load_relaxed32(PDC_OFF_STOP) != PDC_STOP_NOW) {
                delay = back_off(delay);
            }
#endif
            // Relaxed: STARTED publishes no data (the header was written before launch,
            // and the launch orders it before every load of this kernel).
            in.store_relaxed32(PDC_OFF_STARTED, 1u);
        }
    }

    for (;;) {
        // Only thread 0 enters (an outer test of threadIdx.x alone, so that no compiled
        // form loads a word of thread 0's in the other threads).
        if (threadIdx.x == 0) {
            // Wait for work, a stop or a pause; only thread 0 touches the control words.
            // STOP and PAUSE (and the next stage's DONE) are loaded relaxed *before* the
            // acquire load of IN_HEAD -- or, with sequenced slots, of the next request's
            // sequence word, IN_HEAD then loaded relaxed too -- so the loads are in
            // flight together: one round trip per poll.
            // Not at all when it decided to leave (a failed header check, or the last
            // run's error); a decided run breaks out with `command` still WORK.
            while (command == WORK) {
                const pdc_u32 stop = in.load_relaxed32(PDC_OFF_STOP);
                const pdc_u32 pause_word = in.load_relaxed32(PDC_OFF_PAUSE);
#if PDC_OUT_LINK
                const pdc_u32 next_done = out.load_relaxed32(PDC_OFF_DONE);
#endif
#if PDC_IN_SEQUENCED
                // Acquire: the host stored the request, then its sequence word (release);
                // the request's loads come after this one (barrier 1 orders them for the
                // other threads). IN_HEAD relaxed: it only sizes the run, whose further
                // requests each thread acquires by their own sequence words.
                const pdc_u64 in_head = in.load_relaxed64(PDC_OFF_IN_HEAD);
                const pdc_u64 sequence = in.load_acquire64(
                    in_slot(s_in_ring, s_in_cap, in_tail) + PDC_IN_SEQUENCE_OFFSET);
#else
                // Acquire: the host stored the requests, then IN_HEAD (release); every
                // thread's request loads come after barrier 1, after this load.
                const pdc_u64 in_head = in.load_acquire64(PDC_OFF_IN_HEAD);
#endif
                if (stop == PDC_STOP_NOW) {
                    command = EXIT;
                    break;
                }
#if PDC_OUT_LINK
                if (next_done != 0u) {  // the next stage finished unasked: a broken link
                    command = EXIT;
                    break;
                }
#endif
                if (stop != PDC_STOP_RUN && stop != PDC_STOP_DRAIN) {
                    report_error(in, PDC_ERROR_PROTOCOL, "the STOP word holds ", 0, stop, true);
                    command = EXIT;
                    break;
                }
                const bool pause = stop == PDC_STOP_RUN && pause_word != 0u;
                if (pause != paused) {
#if PDC_OUT_LINK
                    // Pass the pause on and wait for the next stage's answer first. PAUSE
                    // relaxed: it carries no data (the next stage parks between runs,
                    // whatever it has seen of IN_HEAD). PAUSED acquire: the next stage's
                    // replies published before its PAUSED are then ordered before ours.
                    out.store_relaxed32(PDC_OFF_PAUSE, pause ? 1u : 0u);
                    pdc_u32 delay = PDC_BACKOFF_MIN_NS;
                    while (out.load_acquire32(PDC_OFF_PAUSED) != (pause ? 1u : 0u) &&
                           out.load_relaxed32(PDC_OFF_DONE) == 0u &&
                           in.load_relaxed32(PDC_OFF_STOP) == PDC_STOP_RUN) {
                        delay = back_off(delay);
                    }
#endif
                    paused = pause;
                    // Release: everything consumed has been answered and published (and,
                    // through the acquire above, the later stages' too): a host that sees
                    // PAUSED sees those replies, and the state the bodies wrote.
                    in.store_release32(PDC_OFF_PAUSED, pause ? 1u : 0u);
                }
                if (paused) {
                    __nanosleep(PDC_BACKOFF_MAX_NS);
                    continue;
                }
#if PDC_IN_SEQUENCED
                // IN_HEAD may lag behind the sequence words (the host stores it after
                // them, and it was loaded relaxed); it must only grow and stay in bounds.
                if (in_head < in_head_seen || (in_head > in_tail && in_head - in_tail > s_in_cap)) {
                    report_error(in, PDC_ERROR_PROTOCOL, "in_head moved to ",
                                 " (backwards, or past in_tail + capacity)", in_head, true);
                    command = EXIT;
                    break;
                }
                in_head_seen = in_head;
                const bool first_ready = sequence == in_tail + 1;
                if (!first_ready && sequence != previous_sequence(s_in_cap, in_tail)) {
                    report_error(in, PDC_ERROR_PROTOCOL, "the sequence word of the next request's "
                                 "slot is ", " (neither this request's nor the previous lap's)",
                                 sequence, true);
                    command = EXIT;
                    break;
                }
                pdc_u64 count = in_head > in_tail ? in_head - in_tail : 0;
                if (first_ready && count == 0) count = 1;
#else
                if (in_head < in_tail || in_head - in_tail > s_in_cap) {
                    report_error(in, PDC_ERROR_PROTOCOL, "in_head moved to ",
                                 " outside [in_tail, in_tail + capacity]", in_head, true);
                    command = EXIT;
                    break;
                }
                pdc_u64 count = in_head - in_tail;
#endif
                pdc_u64 space = s_out_cap - (out_head - out_tail);
                if (count != 0 && space == 0) {  // reload the output ring's tail only now
                    // Acquire: the reader copied those replies out, then stored its tail
                    // (release); the block overwrites the slots after barrier 1.
                    out_tail = out.load_acquire64(PDC_OUT_TAIL_WORD);
                    if (out_tail > out_head || out_head - out_tail > s_out_cap) {
                        report_error(in, PDC_ERROR_PROTOCOL, "the output ring's tail moved to ",
                                     " outside [head - capacity, head]", out_tail, true);
                        command = EXIT;
                        break;
                    }
                    space = s_out_cap - (out_head - out_tail);
                }
                if (count == 0 || space == 0) {
                    if (count == 0 && stop == PDC_STOP_DRAIN && in_tail == out_head) {
                        // STOP was loaded relaxed, and not before IN_HEAD in any order that
                        // counts, so this IN_HEAD may predate requests the host published
                        // before it stored DRAIN (release). The acquire fence makes the
                        // STOP load that saw DRAIN an acquire: IN_HEAD loaded after it is
                        // the final one. Relaxed suffices for that load: if it shows more
                        // requests, the next poll acquires them as any other.
                        cuda::atomic_thread_fence(cuda::memory_order_acquire, PDC_IN_SCOPE);
                        if (in.load_relaxed64(PDC_OFF_IN_HEAD) == in_tail) {
                            command = EXIT;  // every published request answered
                            break;
                        }
                        continue;
                    }
                    backoff = back_off(backoff);
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
#if PDC_IN_SEQUENCED
                s_first_acquired = first_ready ? 1u : 0u;
#endif
                backoff = PDC_BACKOFF_MIN_NS;
                break;
            }
            s_command = command;  // plain: the other threads load it after barrier 1
        }
        __syncthreads();  // barrier 1: the run (or EXIT) is decided
        if (s_command != WORK) break;

        // No fence here: barrier 1 orders this thread's request loads after thread 0's
        // acquire load (see the top of the file).
        const pdc_u64 first = s_first, count = s_count;
        unsigned char* const requests = in_region + in_slot(s_in_ring, s_in_cap, first);
        unsigned char* const replies =
            out_region + s_out_ring + (s_out % s_out_cap) * sizeof(pdc_reply);
        // Request i of the run may be read (by any thread, after a barrier): with
        // sequenced slots, acquire its sequence word first, until it shows the request
        // (the acquire orders the request's loads after the host's stores of it; barrier
        // 1 does for the first request when thread 0 acquired it). False, and the run's
        // error recorded, if the word is neither this request's nor the last lap's.
        auto acquire = [&](pdc_u64 i) -> bool {
#if PDC_IN_SEQUENCED
            if (i == 0 && s_first_acquired != 0u) return true;
            // Published per the IN_HEAD thread 0 loaded relaxed: acquire this slot's own
            // sequence word, which the host stored before that IN_HEAD.
            const pdc_u64 want = first + i + 1;
            const pdc_u64 before = previous_sequence(s_in_cap, first + i);
            const pdc_u64 word = in_slot(s_in_ring, s_in_cap, first + i) + PDC_IN_SEQUENCE_OFFSET;
            pdc_u64 sequence;
            while ((sequence = in.load_acquire64(word)) != want) {
                if (sequence != before) break;
            }
            if (sequence != want) {
                // Shared-memory CAS (block scope): never on a region.
                if (atomicCAS(&s_error, 0u, PDC_ERROR_PROTOCOL) == 0u) {
                    s_error_at = first + i;
                    s_sequence_error = 1u;
                }
                return false;
            }
#else
            (void)i;
#endif
            return true;
        };
        // Run the body on request i at `request`, its reply at `reply`.
        auto run = [&](pdc_u64 i, const unsigned char* request_bytes, unsigned char* reply_bytes) {
            const pdc_request& request = *reinterpret_cast<const pdc_request*>(request_bytes);
            pdc_reply& reply = *reinterpret_cast<pdc_reply*>(reply_bytes);
            const int code = @@BODY@@(request, reply@@STATE_ARG@@);
            // Replies leave the process: padding goes out zero, never what the slot or
            // the stage held before, nor what the body copied into it (a struct
            // assignment copies padding). Stores to padding bytes only: free where the
            // record has none.
            pdc_zero_padding(reply);
            if (code != 0) {
                // Shared-memory CAS (block scope): never on a region.
                if (atomicCAS(&s_error, 0u, static_cast<pdc_u32>(code)) == 0u) {
                    s_error_at = first + i;
                    s_sequence_error = 0u;
                }
            }
        };
        unsigned char* const stage = s_stage;
        if (stage == nullptr) {  // in place: each thread reads its requests from the ring
            for (pdc_u64 i = threadIdx.x; i < count; i += blockDim.x) {
                if (acquire(i)) run(i, requests + i * PDC_IN_SLOT_SIZE, replies + i * sizeof(pdc_reply));
            }
        } else {
#if PDC_IN_SEQUENCED
            for (pdc_u64 i = threadIdx.x; i < count; i += blockDim.x) acquire(i);
            __syncthreads();  // every request of the run acquired (or the run failed)
            // s_error: CAS-ed before the barrier, stored by thread 0 only after barrier 2.
            const bool go = s_error == 0u;
#else
            const bool go = true;
#endif
            const pdc_u64 per = s_stage_records;
            for (pdc_u64 done = 0; go && done < count; done += per) {
                const pdc_u64 n = min64(per, count - done);
                const unsigned char* from = requests + done * PDC_IN_SLOT_SIZE;
                unsigned char* to = replies + done * sizeof(pdc_reply);
                unsigned char* staged_requests = stage_area(stage, from);
                unsigned char* staged_replies =
                    stage_area(staged_requests + n * PDC_IN_SLOT_SIZE, to);
                if (done != 0) __syncthreads();  // the last chunk's replies are copied out
                block_copy(staged_requests, from, n * PDC_IN_SLOT_SIZE);
                __syncthreads();  // the chunk's requests are staged
                for (pdc_u64 i = threadIdx.x; i < n; i += blockDim.x) {
                    run(done + i, staged_requests + i * PDC_IN_SLOT_SIZE,
                        staged_replies + i * sizeof(pdc_reply));
                }
                __syncthreads();  // the chunk's replies are staged
                block_copy(to, staged_replies, n * sizeof(pdc_reply));
            }
        }
        // No fence here: barrier 2 orders this thread's reply stores (and request loads)
        // before thread 0's release stores of the output head and IN_TAIL.
        __syncthreads();  // barrier 2: every reply of the run is written

        if (threadIdx.x == 0) {
            if (s_error != 0u && s_sequence_error != 0u) {
                report_error(in, s_error, "the sequence word of request #",
                             "'s slot is neither its own nor the previous lap's", s_error_at,
                             true);
                command = EXIT;  // handed to the block at the next barrier 1
            } else if (s_error != 0u) {
                report_error(in, s_error, "the kernel body returned an error for request #", 0,
                             s_error_at, true);
                command = EXIT;  // handed to the block at the next barrier 1
            } else {
                out_head += count;
                in_tail += count;
                batches += 1;
                // Release: the replies are visible before the head that publishes them.
                out.store_release64(PDC_OUT_HEAD_WORD, out_head);
                // Release: every request load of the run is done before its slots are
                // handed back (the host overwrites them after an acquire of IN_TAIL).
                in.store_release64(PDC_OFF_IN_TAIL, in_tail);
                // Relaxed: statistics, nothing depends on it.
                in.store_relaxed64(PDC_OFF_BATCHES, batches);
            }
        }
    }

    if (threadIdx.x == 0) {
#if PDC_OUT_LINK
        // Stop the next stage -- a drain if this one drained (asked to, without an
        // error, everything published consumed and forwarded), else now -- and wait for
        // its DONE (passing on a NOW that comes meanwhile), so that DONE comes back up
        // stage by stage.
        // (A drain that finished was checked after the acquire fence above; this load
        // of IN_HEAD decides nothing else, so it is relaxed.)
        // ERROR_CODE plain: this thread is the only one that stores it.
        const bool drain = in.load_relaxed32(PDC_OFF_STOP) == PDC_STOP_DRAIN &&
                           in.word32(PDC_OFF_ERROR_CODE) == 0u &&
                           in.load_relaxed64(PDC_OFF_IN_HEAD) == in_tail;
        // Release: a DRAIN comes after this stage's last IN_HEAD store in the next ring
        // (ring-protocol.md section 6: the host publishes nothing after the stop).
        out.store_release32(PDC_OFF_STOP, drain ? PDC_STOP_DRAIN : PDC_STOP_NOW);
        bool now_passed = !drain;
        pdc_u32 delay = PDC_BACKOFF_MIN_NS;
        // Acquire: the next stage's error words, and everything before its DONE (the
        // last stage's final replies), are ordered before this stage's DONE.
        while (out.load_acquire32(PDC_OFF_DONE) == 0u) {
            if (!now_passed && in.load_relaxed32(PDC_OFF_STOP) == PDC_STOP_NOW) {
                // Relaxed: NOW carries no data, and follows the DRAIN in the same word.
                out.store_relaxed32(PDC_OFF_STOP, PDC_STOP_NOW);  // NOW wins
                now_passed = true;
            }
            delay = back_off(delay);
        }
        if (in.word32(PDC_OFF_ERROR_CODE) == 0u) adopt_error(in, out);  // plain: ours
#endif
        if (s_stage != reinterpret_cast<unsigned char*>(s_stage_words)) free(s_stage);  // heap
        // Relaxed: DONE below is the release that covers it.
        if (paused) in.store_relaxed32(PDC_OFF_PAUSED, 0u);
        // Release: every store of this kernel (replies, heads, error words) is visible
        // before DONE; nothing touches the region after it.
        in.store_release32(PDC_OFF_DONE, 1u);
    }
}
