// The CUDA vocabulary of pdc's resident ring kernel, given its C++20 meaning on CPU
// threads (pdc_cuda.testing, docs/cuda-backend.md "The host build").
//
// One launch is one block of real std::threads over host memory:
//   threadIdx/blockIdx/blockDim/gridDim  thread-local, set by the launch for each thread
//   __syncthreads()                      a barrier over the block's threads (mutex and
//                                        condition variable: every thread's accesses before
//                                        it happen before every thread's accesses after it,
//                                        as bar.sync orders them for the block)
//   __shared__                           a function-local static: one per loaded instance of
//                                        the build, and the launcher gives every running
//                                        block its own instance (pdc_cuda.testing._build)
//   __device__ variables                 namespace-scope variables of the loaded instance, so
//                                        NOT what a GPU does for two blocks of one build that
//                                        run at once: on a GPU both blocks use the module's one
//                                        copy, here each block has its own (the cost of giving
//                                        __shared__ a copy per block). pdc launches one block
//                                        per kernel, so this shows only when two resident
//                                        kernels of the same source and options run on one
//                                        device (the cuda backend shares one module between
//                                        them) and the source has __device__ variables; and a
//                                        later launch of a build may get a fresh copy, or a
//                                        pooled one with an earlier launch's values, where a
//                                        GPU keeps the module's. Kernels on different devices
//                                        have separate copies on both.
//   cuda::atomic_ref<T, Scope>           std::atomic_ref<T>, after checking Scope against the
//                                        scope the memory needs (system for mapped host
//                                        memory, device for device memory): a narrower scope
//                                        fails the launch loudly, naming the source line
//   cuda::atomic_thread_fence            std::atomic_thread_fence
//   atomicAdd/atomicCAS/...              device-scope std::atomic_ref read-modify-writes
//                                        (checked like a device-scope atomic_ref)
//   __threadfence*                       std::atomic_thread_fence(seq_cst)
//   __nanosleep(ns)                      a real sleep (the thread gives up its core)
//   clock64()                            a monotonic nanosecond count
//   fabsf, fmaxf, sqrtf, expf, ...       <math.h>'s C functions: the names of CUDA's math
//                                        library and their meaning (the last bits of a
//                                        result may differ from the GPU's)
//
// This header must never let through what NVRTC rejects: it defines only names CUDA
// defines, and every source the host build compiles is first compiled by NVRTC
// (pdc_cuda.testing.build_ring_kernel refuses otherwise). Anything CUDA has that is
// not here (warp intrinsics, textures, ...) fails the host build, never the reverse.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <math.h>
#include <mutex>
#include <source_location>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

struct uint3 {
    unsigned int x, y, z;
};
struct dim3 {
    unsigned int x = 1, y = 1, z = 1;
};

#define __device__
#define __global__
#define __host__
#define __forceinline__ __attribute__((always_inline)) inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __shared__ static
#define __restrict__ __restrict

static thread_local uint3 threadIdx;
static thread_local uint3 blockIdx;
static thread_local dim3 blockDim;
static thread_local dim3 gridDim;
static constexpr int warpSize = 32;

namespace pdc_host {

// Scope ranks: a region needs at least its rank.
enum : int { RANK_THREAD = 0, RANK_BLOCK = 1, RANK_DEVICE = 2, RANK_SYSTEM = 3 };

inline const char* rank_name(int rank) {
    switch (rank) {
        case RANK_THREAD: return "thread_scope_thread";
        case RANK_BLOCK: return "thread_scope_block";
        case RANK_DEVICE: return "thread_scope_device";
        default: return "thread_scope_system";
    }
}

// A memory region the launch knows, with the scope its atomics need.
struct Region {
    std::uintptr_t base;
    std::size_t size;
    int rank;
    std::string what;
};

// Thrown inside a kernel thread to unwind it when the launch fails or is aborted.
struct Abort {};

// __syncthreads(): a barrier over the block's threads that a failure can break (then
// every waiting thread unwinds instead of waiting forever). A thread that leaves the
// kernel drops out of it.
class Barrier {
  public:
    explicit Barrier(unsigned count) : count_(count) {}
    void arrive_and_wait() {
        std::unique_lock<std::mutex> lock(mutex_);
        if (broken_) throw Abort{};
        const unsigned long generation = generation_;
        if (++waiting_ == count_) {
            release_locked();
            return;
        }
        cv_.wait(lock, [&] { return generation_ != generation || broken_; });
        if (generation_ == generation) throw Abort{};
    }
    void drop() {
        std::lock_guard<std::mutex> lock(mutex_);
        --count_;
        if (count_ != 0 && waiting_ == count_) release_locked();
    }
    void poison() {
        std::lock_guard<std::mutex> lock(mutex_);
        broken_ = true;
        cv_.notify_all();
    }

  private:
    void release_locked() {
        waiting_ = 0;
        ++generation_;
        cv_.notify_all();
    }
    std::mutex mutex_;
    std::condition_variable cv_;
    unsigned count_;
    unsigned waiting_ = 0;
    unsigned long generation_ = 0;
    bool broken_ = false;
};

// One launch: one block of `threads` threads.
struct Launch {
    explicit Launch(unsigned threads) : barrier(threads), threads(threads) {}
    Barrier barrier;
    unsigned threads;
    std::vector<Region> regions;
    std::atomic<bool> abort{false};
    std::mutex failure_mutex;
    std::string failure;  // the first failure (empty: none)
    std::atomic<unsigned> running{0};
    std::atomic<int> status{0};  // 0 running, 1 finished, 2 failed
    std::vector<std::thread> workers;

    void fail(const std::string& why) {
        {
            std::lock_guard<std::mutex> lock(failure_mutex);
            if (failure.empty()) failure = why;
        }
        abort.store(true, std::memory_order_relaxed);
        barrier.poison();
    }
};

inline thread_local Launch* current = nullptr;

// Fail the launch (the first failure is kept) and unwind this thread.
[[noreturn]] inline void fail(const std::string& why) {
    if (current != nullptr) current->fail(why);
    std::fprintf(stderr, "pdc host kernel: %s\n", why.c_str());
    throw Abort{};
}

inline void check_abort() {
    if (current != nullptr && current->abort.load(std::memory_order_relaxed)) throw Abort{};
}

inline std::string where(const std::source_location& at) {
    return std::string(at.file_name()) + ":" + std::to_string(at.line());
}

// An atomic of scope `rank` on [p, p + n): the memory must need no wider scope, and
// the word must be naturally aligned.
inline void check_atomic(const void* p, std::size_t n, int rank, const char* what,
                         const std::source_location& at) {
    const auto address = reinterpret_cast<std::uintptr_t>(p);
    if (address % n != 0) {
        fail(where(at) + ": " + what + " on a misaligned address");
    }
    if (current == nullptr) return;
    for (const Region& region : current->regions) {
        if (address >= region.base && address + n <= region.base + region.size) {
            if (rank < region.rank) {
                char offset[32];
                std::snprintf(offset, sizeof offset, "%zu", static_cast<std::size_t>(address - region.base));
                fail(where(at) + ": " + what + " at " + rank_name(rank) + " on " + region.what +
                     " (byte " + offset + "), which needs " + rank_name(region.rank) +
                     ": the other side of that memory would not see this access ordered");
            }
            return;
        }
    }
}

}  // namespace pdc_host

namespace cuda {

// libcu++'s values.
enum thread_scope {
    thread_scope_system = 0,
    thread_scope_device = 1,
    thread_scope_block = 2,
    thread_scope_thread = 3,
};

namespace detail {
constexpr int rank(thread_scope scope) {
    return scope == thread_scope_system   ? pdc_host::RANK_SYSTEM
           : scope == thread_scope_device ? pdc_host::RANK_DEVICE
           : scope == thread_scope_block  ? pdc_host::RANK_BLOCK
                                          : pdc_host::RANK_THREAD;
}
}  // namespace detail

using memory_order = std::memory_order;
inline constexpr memory_order memory_order_relaxed = std::memory_order_relaxed;
inline constexpr memory_order memory_order_consume = std::memory_order_consume;
inline constexpr memory_order memory_order_acquire = std::memory_order_acquire;
inline constexpr memory_order memory_order_release = std::memory_order_release;
inline constexpr memory_order memory_order_acq_rel = std::memory_order_acq_rel;
inline constexpr memory_order memory_order_seq_cst = std::memory_order_seq_cst;

template <class T, thread_scope Scope = thread_scope_system>
class atomic_ref {
  public:
    explicit atomic_ref(T& object, std::source_location at = std::source_location::current())
        : ref_(checked(object, at)) {}

    T load(memory_order order = memory_order_seq_cst) const {
        pdc_host::check_abort();
        return ref_.load(order);
    }
    void store(T value, memory_order order = memory_order_seq_cst) const {
        ref_.store(value, order);
    }
    operator T() const { return load(); }
    T operator=(T value) const {
        store(value);
        return value;
    }
    T exchange(T value, memory_order order = memory_order_seq_cst) const {
        return ref_.exchange(value, order);
    }
    bool compare_exchange_weak(T& expected, T desired,
                               memory_order order = memory_order_seq_cst) const {
        return ref_.compare_exchange_weak(expected, desired, order);
    }
    bool compare_exchange_strong(T& expected, T desired,
                                 memory_order order = memory_order_seq_cst) const {
        return ref_.compare_exchange_strong(expected, desired, order);
    }
    bool compare_exchange_weak(T& expected, T desired, memory_order success,
                               memory_order failure) const {
        return ref_.compare_exchange_weak(expected, desired, success, failure);
    }
    bool compare_exchange_strong(T& expected, T desired, memory_order success,
                                 memory_order failure) const {
        return ref_.compare_exchange_strong(expected, desired, success, failure);
    }
    T fetch_add(T value, memory_order order = memory_order_seq_cst) const
        requires(std::is_integral_v<T> || std::is_floating_point_v<T>)
    {
        return ref_.fetch_add(value, order);
    }
    T fetch_sub(T value, memory_order order = memory_order_seq_cst) const
        requires(std::is_integral_v<T> || std::is_floating_point_v<T>)
    {
        return ref_.fetch_sub(value, order);
    }
    T fetch_and(T value, memory_order order = memory_order_seq_cst) const
        requires std::is_integral_v<T>
    {
        return ref_.fetch_and(value, order);
    }
    T fetch_or(T value, memory_order order = memory_order_seq_cst) const
        requires std::is_integral_v<T>
    {
        return ref_.fetch_or(value, order);
    }
    T fetch_xor(T value, memory_order order = memory_order_seq_cst) const
        requires std::is_integral_v<T>
    {
        return ref_.fetch_xor(value, order);
    }

  private:
    static T& checked(T& object, const std::source_location& at) {
        pdc_host::check_atomic(&object, sizeof(T), detail::rank(Scope), "cuda::atomic_ref", at);
        return object;
    }
    std::atomic_ref<T> ref_;
};

inline void atomic_thread_fence(memory_order order, thread_scope = thread_scope_system) {
    std::atomic_thread_fence(order);
}

}  // namespace cuda

// ---- CUDA's built-in functions the ring kernel and its bodies may use -----------------

inline void __syncthreads() {
    if (pdc_host::current == nullptr) pdc_host::fail("__syncthreads() outside a launch");
    pdc_host::current->barrier.arrive_and_wait();
}

inline void __nanosleep(unsigned int ns) {
    pdc_host::check_abort();
    std::this_thread::sleep_for(std::chrono::nanoseconds(ns));
    pdc_host::check_abort();
}

inline long long int clock64() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }

namespace pdc_host {
// A device-scope read-modify-write, as CUDA's atomic*() functions are.
template <class T>
std::atomic_ref<T> device_atomic(T* address, const char* what, const std::source_location& at) {
    check_atomic(address, sizeof(T), RANK_DEVICE, what, at);
    return std::atomic_ref<T>(*address);
}
}  // namespace pdc_host

#define PDC_HOST_AT std::source_location at = std::source_location::current()

// The overloads CUDA declares (no others: a body that compiles here compiles there).
#define PDC_HOST_ATOMIC_ADD(T)                                                   \
    inline T atomicAdd(T* address, T value, PDC_HOST_AT) {                       \
        return pdc_host::device_atomic(address, "atomicAdd", at).fetch_add(value); \
    }
PDC_HOST_ATOMIC_ADD(int)
PDC_HOST_ATOMIC_ADD(unsigned int)
PDC_HOST_ATOMIC_ADD(unsigned long long int)
PDC_HOST_ATOMIC_ADD(float)
PDC_HOST_ATOMIC_ADD(double)
#undef PDC_HOST_ATOMIC_ADD

#define PDC_HOST_ATOMIC_INT(NAME, T, BODY)                         \
    inline T NAME(T* address, T value, PDC_HOST_AT) {              \
        auto ref = pdc_host::device_atomic(address, #NAME, at);    \
        BODY                                                       \
    }
#define PDC_HOST_ATOMIC_INTS(NAME, BODY)                 \
    PDC_HOST_ATOMIC_INT(NAME, int, BODY)                 \
    PDC_HOST_ATOMIC_INT(NAME, unsigned int, BODY)        \
    PDC_HOST_ATOMIC_INT(NAME, unsigned long long int, BODY)
PDC_HOST_ATOMIC_INTS(atomicExch, return ref.exchange(value);)
PDC_HOST_ATOMIC_INTS(atomicAnd, return ref.fetch_and(value);)
PDC_HOST_ATOMIC_INTS(atomicOr, return ref.fetch_or(value);)
PDC_HOST_ATOMIC_INTS(atomicXor, return ref.fetch_xor(value);)
PDC_HOST_ATOMIC_INTS(atomicMin, auto old = ref.load();
                     while (value < old && !ref.compare_exchange_weak(old, value)) {} return old;)
PDC_HOST_ATOMIC_INTS(atomicMax, auto old = ref.load();
                     while (value > old && !ref.compare_exchange_weak(old, value)) {} return old;)
#undef PDC_HOST_ATOMIC_INTS
#undef PDC_HOST_ATOMIC_INT

inline int atomicSub(int* address, int value, PDC_HOST_AT) {
    return pdc_host::device_atomic(address, "atomicSub", at).fetch_sub(value);
}
inline unsigned int atomicSub(unsigned int* address, unsigned int value, PDC_HOST_AT) {
    return pdc_host::device_atomic(address, "atomicSub", at).fetch_sub(value);
}
inline float atomicExch(float* address, float value, PDC_HOST_AT) {
    return pdc_host::device_atomic(address, "atomicExch", at).exchange(value);
}

#define PDC_HOST_ATOMIC_CAS(T)                                                  \
    inline T atomicCAS(T* address, T compare, T value, PDC_HOST_AT) {           \
        pdc_host::device_atomic(address, "atomicCAS", at)                       \
            .compare_exchange_strong(compare, value);                           \
        return compare;                                                         \
    }
PDC_HOST_ATOMIC_CAS(int)
PDC_HOST_ATOMIC_CAS(unsigned int)
PDC_HOST_ATOMIC_CAS(unsigned long long int)
PDC_HOST_ATOMIC_CAS(unsigned short int)
#undef PDC_HOST_ATOMIC_CAS
#undef PDC_HOST_AT
