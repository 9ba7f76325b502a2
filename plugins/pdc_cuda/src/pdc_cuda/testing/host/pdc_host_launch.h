// The launcher of the host build (pdc_cuda.testing): included after the rendered ring
// kernel, it runs pdc_ring_kernel as one block of `threads` std::threads.
//
//   void* pdc_host_launch(in, out, state, threads, regions, count)
//       regions: `count` triples (base, size, scope rank) of the memory the launch knows
//       (rank 3: system, for mapped host memory; 2: device); returns at once.
//   int   pdc_host_status(launch)   0 running, 1 finished, 2 failed (never blocks)
//   long  pdc_host_failure(launch, buffer, size)  the failure's text; its length
//   void  pdc_host_abort(launch)    make every thread unwind at its next wait or poll
//   void  pdc_host_join(launch)     wait for every thread
//   void  pdc_host_free(launch)     free a joined launch
#pragma once

#include <cstring>
#include <exception>

namespace pdc_host {

inline void run_thread(Launch* launch, unsigned index, unsigned char* in, unsigned char* out,
                       pdc_state* state) {
    current = launch;
    threadIdx = uint3{index, 0, 0};
    blockIdx = uint3{0, 0, 0};
    blockDim = dim3{launch->threads, 1, 1};
    gridDim = dim3{1, 1, 1};
    try {
        pdc_ring_kernel(in, out, state);
    } catch (const Abort&) {
        // the launch failed or was aborted: its failure is already recorded
    } catch (const std::exception& error) {
        launch->fail(std::string("a kernel thread threw ") + error.what());
    } catch (...) {
        launch->fail("a kernel thread threw an unknown exception");
    }
    launch->barrier.drop();
    current = nullptr;
    // acq_rel: the last thread out sees every thread's work before it reports the end.
    if (launch->running.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        bool failed;
        {
            std::lock_guard<std::mutex> lock(launch->failure_mutex);
            failed = !launch->failure.empty();
        }
        launch->status.store(failed ? 2 : 1, std::memory_order_release);
    }
}

}  // namespace pdc_host

extern "C" __attribute__((visibility("default"))) void* pdc_host_launch(unsigned char* in, unsigned char* out, void* state,
                                 unsigned threads, const unsigned long long* regions,
                                 unsigned count) {
    auto* launch = new pdc_host::Launch(threads);
    static const char* kinds[] = {"thread-local memory", "block memory", "device memory",
                                  "mapped host memory"};
    for (unsigned i = 0; i < count; ++i) {
        const int rank = static_cast<int>(regions[3 * i + 2]);
        launch->regions.push_back(pdc_host::Region{
            static_cast<std::uintptr_t>(regions[3 * i]), static_cast<std::size_t>(regions[3 * i + 1]),
            rank, kinds[rank & 3]});
    }
    launch->running.store(threads, std::memory_order_relaxed);
    launch->workers.reserve(threads);
    for (unsigned i = 0; i < threads; ++i) {
        launch->workers.emplace_back(pdc_host::run_thread, launch, i, in, out,
                                     static_cast<pdc_state*>(state));
    }
    return launch;
}

extern "C" __attribute__((visibility("default"))) int pdc_host_status(void* handle) {
    return static_cast<pdc_host::Launch*>(handle)->status.load(std::memory_order_acquire);
}

extern "C" __attribute__((visibility("default"))) long pdc_host_failure(void* handle, char* buffer, long size) {
    auto* launch = static_cast<pdc_host::Launch*>(handle);
    std::lock_guard<std::mutex> lock(launch->failure_mutex);
    const long length = static_cast<long>(launch->failure.size());
    if (size > 0) {
        const long n = length < size - 1 ? length : size - 1;
        std::memcpy(buffer, launch->failure.data(), static_cast<std::size_t>(n));
        buffer[n] = '\0';
    }
    return length;
}

extern "C" __attribute__((visibility("default"))) void pdc_host_abort(void* handle) {
    static_cast<pdc_host::Launch*>(handle)->fail(
        "aborted by the host: the launch was discarded while its threads still ran");
}

extern "C" __attribute__((visibility("default"))) void pdc_host_join(void* handle) {
    auto* launch = static_cast<pdc_host::Launch*>(handle);
    for (std::thread& worker : launch->workers) worker.join();
}

extern "C" __attribute__((visibility("default"))) void pdc_host_free(void* handle) { delete static_cast<pdc_host::Launch*>(handle); }
