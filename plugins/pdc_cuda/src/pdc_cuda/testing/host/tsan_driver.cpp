// The host side of the ring protocol in C++, for ThreadSanitizer (pdc_cuda.testing).
//
// Python's host side stores words with NumPy, which ThreadSanitizer cannot see; this
// driver plays it with C++ atomics of exactly the orders docs/ring-protocol.md section 5
// asks of the host, so every access on both sides is visible to TSan. It loads host
// builds of rendered ring kernels (built with -fsanitize=thread), lays out their
// regions from images Python wrote (RingMemory headers), launches the stages (the last
// first, as the cuda backend does), and runs one scenario:
//
//   pdc_tsan_driver PLAN
//   PLAN lines:
//     region NAME IMAGE-FILE SCOPE-RANK SEQUENCE-OFFSET   (rank 3 system, 2 device; -1: plain)
//     stage SO-FILE IN-REGION OUT-REGION THREADS
//     scenario drain|now|error COUNT MUL ADD [ERROR-CODE MESSAGE-PART]
//
// The records are (u64 id, f64 x); a reply's x must be MUL * x + ADD. "drain" sends
// COUNT requests in batches of 1..7 (pausing and resuming half way), stops with DRAIN
// and checks every reply; "now" stops with NOW after half of them and checks what came
// back; "error" expects the kernel to stop by itself with ERROR-CODE and a message
// containing MESSAGE-PART (spaces as '_'). Exit status 0 when the scenario held.
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "pdc_ring_constants.h"

namespace {

using u64 = std::uint64_t;
using u32 = std::uint32_t;

struct Record {
    u64 id;
    double x;
};

struct Region {
    unsigned char* base = nullptr;
    std::size_t size = 0;
    int rank = 3;
    long sequence_offset = -1;

    u64& w64(u64 offset) const { return *reinterpret_cast<u64*>(base + offset); }
    u32& w32(u64 offset) const { return *reinterpret_cast<u32*>(base + offset); }
    u64 acquire64(u64 offset) const { return std::atomic_ref<u64>(w64(offset)).load(std::memory_order_acquire); }
    u32 acquire32(u64 offset) const { return std::atomic_ref<u32>(w32(offset)).load(std::memory_order_acquire); }
    u32 relaxed32(u64 offset) const { return std::atomic_ref<u32>(w32(offset)).load(std::memory_order_relaxed); }
    void release64(u64 offset, u64 value) const { std::atomic_ref<u64>(w64(offset)).store(value, std::memory_order_release); }
    void release32(u64 offset, u32 value) const { std::atomic_ref<u32>(w32(offset)).store(value, std::memory_order_release); }
};

struct Api {
    void* (*launch)(unsigned char*, unsigned char*, void*, unsigned, const unsigned long long*, unsigned);
    int (*status)(void*);
    long (*failure)(void*, char*, long);
    void (*abort)(void*);
    void (*join)(void*);
    void (*free)(void*);
};

struct Stage {
    Api api{};
    std::string in, out;
    unsigned threads = 1;
    void* launch = nullptr;
};

[[noreturn]] void die(const std::string& why) {
    std::fprintf(stderr, "pdc_tsan_driver: FAILED: %s\n", why.c_str());
    std::exit(2);
}

template <class F>
void symbol(void* lib, const char* name, F& out) {
    void* found = dlsym(lib, name);
    if (found == nullptr) die(std::string("no symbol ") + name);
    out = reinterpret_cast<F>(found);
}

void pause_briefly() { std::this_thread::sleep_for(std::chrono::microseconds(20)); }

class Host {
  public:
    explicit Host(const Region& region) : r_(region) {
        in_ring_ = r_.w64(PDC_OFF_IN_RING);  // plain: the header, written before launch
        in_cap_ = r_.w64(PDC_OFF_IN_CAPACITY);
        in_slot_ = r_.w64(PDC_OFF_IN_SLOT_SIZE);
        out_ring_ = r_.w64(PDC_OFF_OUT_RING);
        out_cap_ = r_.w64(PDC_OFF_OUT_CAPACITY);
    }

    // Publish up to `count` requests from `next`; returns how many (room permitting).
    u64 publish(u64 count, double (*x_of)(u64)) {
        const u64 tail = r_.acquire64(PDC_OFF_IN_TAIL);  // acquire: then overwrite freed slots
        const u64 room = in_cap_ - (head_ - tail);
        const u64 n = count < room ? count : room;
        for (u64 i = 0; i < n; ++i) {
            const u64 index = head_ + i;
            auto* slot = r_.base + in_ring_ + (index % in_cap_) * in_slot_;
            const Record record{index, x_of(index)};
            std::memcpy(slot, &record, sizeof record);
        }
        if (r_.sequence_offset >= 0) {
            for (u64 i = 0; i < n; ++i) {  // release, each after the request's bytes
                const u64 index = head_ + i;
                r_.release64(in_ring_ + (index % in_cap_) * in_slot_ + r_.sequence_offset, index + 1);
            }
        }
        head_ += n;
        if (n) r_.release64(PDC_OFF_IN_HEAD, head_);  // release: after the slots
        return n;
    }

    // Copy out every published reply; returns how many.
    u64 consume(std::vector<Record>& replies) {
        const u64 head = r_.acquire64(PDC_OFF_OUT_HEAD);  // acquire: then read the slots
        for (u64 index = out_tail_; index < head; ++index) {
            Record record;
            std::memcpy(&record, r_.base + out_ring_ + (index % out_cap_) * sizeof(Record), sizeof record);
            replies.push_back(record);
        }
        const u64 n = head - out_tail_;
        out_tail_ = head;
        if (n) r_.release64(PDC_OFF_OUT_TAIL, out_tail_);  // release: after the copies
        return n;
    }

    u64 head() const { return head_; }

  private:
    const Region& r_;
    u64 in_ring_, in_cap_, in_slot_, out_ring_, out_cap_;
    u64 head_ = 0, out_tail_ = 0;
};

double x_of(u64 index) { return static_cast<double>(index % 1000); }

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) die("usage: pdc_tsan_driver PLAN");
    std::ifstream plan(argv[1]);
    std::map<std::string, Region> regions;
    std::vector<Stage> stages;
    std::string scenario, message_part;
    u64 count = 0;
    double mul = 1, add = 0;
    u32 error_code = 0;
    std::string line;
    while (std::getline(plan, line)) {
        std::istringstream words(line);
        std::string kind;
        words >> kind;
        if (kind == "region") {
            std::string name, file;
            Region region;
            words >> name >> file >> region.rank >> region.sequence_offset;
            std::ifstream image(file, std::ios::binary);
            std::vector<char> bytes((std::istreambuf_iterator<char>(image)), std::istreambuf_iterator<char>());
            region.size = bytes.size();
            region.base = static_cast<unsigned char*>(std::aligned_alloc(128, (bytes.size() + 127) / 128 * 128));
            std::memcpy(region.base, bytes.data(), bytes.size());
            regions[name] = region;
        } else if (kind == "stage") {
            Stage stage;
            std::string so;
            words >> so >> stage.in >> stage.out >> stage.threads;
            void* lib = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
            if (lib == nullptr) die(std::string("dlopen: ") + dlerror());
            symbol(lib, "pdc_host_launch", stage.api.launch);
            symbol(lib, "pdc_host_status", stage.api.status);
            symbol(lib, "pdc_host_failure", stage.api.failure);
            symbol(lib, "pdc_host_abort", stage.api.abort);
            symbol(lib, "pdc_host_join", stage.api.join);
            symbol(lib, "pdc_host_free", stage.api.free);
            stages.push_back(stage);
        } else if (kind == "scenario") {
            words >> scenario >> count >> mul >> add >> error_code >> message_part;
            for (char& c : message_part) c = c == '_' ? ' ' : c;
        }
    }
    if (stages.empty() || !regions.count("host")) die("the plan has no stages or no host region");
    std::vector<unsigned long long> table;
    for (const auto& [name, region] : regions) {
        table.push_back(reinterpret_cast<std::uintptr_t>(region.base));
        table.push_back(region.size);
        table.push_back(static_cast<unsigned long long>(region.rank));
    }
    for (auto it = stages.rbegin(); it != stages.rend(); ++it) {  // the last first
        it->launch = it->api.launch(regions.at(it->in).base, regions.at(it->out).base, nullptr,
                                    it->threads, table.data(), static_cast<unsigned>(regions.size()));
    }

    const Region& host_region = regions.at("host");
    Host host(host_region);
    std::vector<Record> replies;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    auto check_time = [&] {
        if (std::chrono::steady_clock::now() > deadline) {
            for (Stage& stage : stages) stage.api.abort(stage.launch);
            for (Stage& stage : stages) stage.api.join(stage.launch);
            die("timed out");
        }
    };
    while (host_region.relaxed32(PDC_OFF_STARTED) == 0u && host_region.acquire32(PDC_OFF_DONE) == 0u) {
        check_time();
        pause_briefly();
    }
    const u64 stop_after = scenario == "now" ? count / 2 : count;
    bool paused_once = scenario != "drain";
    u64 batch = 1;
    while (host.head() < stop_after && host_region.acquire32(PDC_OFF_DONE) == 0u) {
        check_time();
        const u64 want = std::min<u64>(batch, stop_after - host.head());
        const u64 sent = host.publish(want, x_of);
        const u64 got = host.consume(replies);
        batch = batch % 7 + 1;
        if (!paused_once && host.head() >= count / 2) {
            paused_once = true;
            host_region.release32(PDC_OFF_PAUSE, 1u);
            while (host_region.acquire32(PDC_OFF_PAUSED) != 1u) {
                check_time();
                host.consume(replies);
                pause_briefly();
            }
            host_region.release32(PDC_OFF_PAUSE, 0u);
            while (host_region.acquire32(PDC_OFF_PAUSED) != 0u) {
                check_time();
                pause_briefly();
            }
        }
        if (sent == 0 && got == 0) pause_briefly();
    }
    if (scenario != "error") {
        // Release: the stop comes after the last IN_HEAD store.
        host_region.release32(PDC_OFF_STOP, scenario == "now" ? PDC_STOP_NOW : PDC_STOP_DRAIN);
    }
    while (host_region.acquire32(PDC_OFF_DONE) == 0u) {  // acquire: then the last replies
        check_time();
        if (host.consume(replies) == 0) pause_briefly();
    }
    host.consume(replies);
    int failures = 0;
    for (Stage& stage : stages) {
        stage.api.join(stage.launch);
        if (stage.api.status(stage.launch) != 1) {
            char why[4096];
            stage.api.failure(stage.launch, why, sizeof why);
            std::fprintf(stderr, "pdc_tsan_driver: a stage's launch failed: %s\n", why);
            ++failures;
        }
        stage.api.free(stage.launch);
    }
    for (u64 i = 0; i < replies.size(); ++i) {
        const double want = mul * x_of(i) + add;
        if (replies[i].id != i || replies[i].x != want) {
            std::fprintf(stderr, "pdc_tsan_driver: reply %llu is (%llu, %g), not (%llu, %g)\n",
                         static_cast<unsigned long long>(i), static_cast<unsigned long long>(replies[i].id),
                         replies[i].x, static_cast<unsigned long long>(i), want);
            ++failures;
            break;
        }
    }
    const u32 code = host_region.acquire32(PDC_OFF_ERROR_CODE);
    const u32 length = host_region.w32(PDC_OFF_ERROR_LENGTH);  // plain: after the acquire of the code
    const std::string message(reinterpret_cast<const char*>(host_region.base + PDC_OFF_ERROR_MESSAGE),
                              std::min<u32>(length, PDC_ERROR_MESSAGE_SIZE));
    if (scenario == "error") {
        if (code != error_code || message.find(message_part) == std::string::npos) {
            std::fprintf(stderr, "pdc_tsan_driver: error word %u '%s', expected %u with '%s'\n", code,
                         message.c_str(), error_code, message_part.c_str());
            ++failures;
        }
    } else if (code != 0) {
        std::fprintf(stderr, "pdc_tsan_driver: unexpected error %u: %s\n", code, message.c_str());
        ++failures;
    }
    if (scenario == "drain" && replies.size() != count) {
        std::fprintf(stderr, "pdc_tsan_driver: %zu replies to %llu requests after a drain\n",
                     replies.size(), static_cast<unsigned long long>(count));
        ++failures;
    }
    std::printf("pdc_tsan_driver: %s: %zu replies to %llu requests, error word %u\n", scenario.c_str(),
                replies.size(), static_cast<unsigned long long>(host.head()), code);
    for (auto& [name, region] : regions) std::free(region.base);
    return failures ? 1 : 0;
}
