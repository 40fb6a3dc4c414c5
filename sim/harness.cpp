// A cycle driver for the Verilated controller top, built into a shared library and called
// from Python (neuron_fabric.sim.harness) through a small C interface.
//
// Python hands over a batch of requests; the driver offers them on i_req with seeded random
// idles, pulls o_resp and o_mem with seeded random backpressure, serves memory reads from its
// own line memory with a seeded latency, and records every response beat and every memory
// request in order. The checking against the golden model stays in Python: the driver only
// has to be fast, so it keeps to plain arrays and touches a wide port only when it changes.
//
// Each cycle is two evaluations: inputs change with the clock low (the falling edge), the
// settled outputs are sampled, then the rising edge moves every register. A transfer happens
// at a rising edge where valid and ready were both high, exactly as on the hardware.
//
// The top's module is Verilated with --prefix Vtop, so this file fits any parameter set;
// the bit offsets of the payload fields come from the manifest at run time. Verilator
// escapes the double underscore of a port name such as i_req__valid as ___05F.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "Vtop.h"
#include "verilated.h"

namespace {

// ---------------------------------------------------------------------------- bit access

// A port of any width as 32-bit words: Verilator keeps ports up to 64 bits in an integer
// and wider ones in a VlWide array of 32-bit words, least significant first.
template <std::size_t N> uint32_t* words(VlWide<N>& port) { return port.data(); }

// Copy `width` bits from src (a little-endian byte string) into dst at bit `offset`, one
// destination word at a time: a 512-bit line is 17 word writes, not 512 bit writes.
void put_bits(uint32_t* dst, int offset, int width, const uint8_t* src) {
    const int nbytes = (width + 7) / 8;
    for (int i = 0; i < width;) {
        int at = offset + i;
        int shift = at & 31;
        int take = std::min(32 - shift, width - i);
        uint64_t chunk = 0;
        int from = i >> 3;
        std::memcpy(&chunk, src + from, std::min(8, nbytes - from));
        chunk >>= (i & 7);
        uint32_t mask = static_cast<uint32_t>(((uint64_t{1} << take) - 1) << shift);
        dst[at >> 5] = (dst[at >> 5] & ~mask) | (static_cast<uint32_t>(chunk << shift) & mask);
        i += take;
    }
}

void put_value(uint32_t* dst, int offset, int width, uint64_t value) {
    uint8_t bytes[8];
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(value >> (8 * i));
    put_bits(dst, offset, width, bytes);
}

// Whole bytes when the field starts on a byte boundary (the data field of a line usually
// does not, so the general path shifts 32-bit words).
void get_bits(const uint32_t* src, int offset, int width, uint8_t* dst) {
    int nbytes = (width + 7) / 8;
    std::memset(dst, 0, nbytes);
    for (int k = 0; k < nbytes; ++k) {
        int at = offset + 8 * k;
        uint64_t pair = src[at >> 5];
        if (((at & 31) + 8) > 32) pair |= static_cast<uint64_t>(src[(at >> 5) + 1]) << 32;
        uint8_t byte = static_cast<uint8_t>(pair >> (at & 31));
        int left = width - 8 * k;
        if (left < 8) byte &= static_cast<uint8_t>((1u << left) - 1);
        dst[k] = byte;
    }
}

uint64_t get_value(const uint32_t* src, int offset, int width) {
    uint8_t bytes[8] = {0};
    get_bits(src, offset, width, bytes);
    uint64_t value = 0;
    for (int i = 0; i < 8; ++i) value |= static_cast<uint64_t>(bytes[i]) << (8 * i);
    return value;
}

// i_mem's payload is the bare line: a VlWide for lines over 64 bits, an integer otherwise.
template <std::size_t N> void put_line(VlWide<N>& port, const uint8_t* line, int bits) {
    put_bits(port.data(), 0, bits, line);
}
template <typename T> void put_line(T& port, const uint8_t* line, int bits) {
    uint64_t value = 0;
    for (int i = 0; i < (bits + 7) / 8; ++i) value |= static_cast<uint64_t>(line[i]) << (8 * i);
    port = static_cast<T>(value);
}

// --------------------------------------------------------------------------- the harness

// Seeded draws that do not depend on the C++ library's implementation (splitmix64).
struct Random {
    uint64_t state;
    uint64_t next() {
        uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }
    int between(int low, int high) { return low + static_cast<int>(next() % (high - low + 1)); }
};

struct Field { int offset, width; };

struct PendingRead { uint64_t due; std::string data; };

struct Harness {
    VerilatedContext context;
    Vtop* top;
    Random random;
    int line_bits = 0, line_bytes = 0;
    Field req_op{}, req_addr{}, req_worker{}, req_data{};
    Field resp_status{}, resp_last{}, resp_data{};
    Field mem_write{}, mem_addr{}, mem_data{};
    double idle = 0, backpressure = 0, mem_backpressure = 0;
    // Quiet cycles that end a batch: longer than the top's pipeline (nf_pipeline).
    int drain_cycles = 0;
    int latency_low = 1, latency_high = 1;
    uint64_t cycles = 0;
    std::unordered_map<uint32_t, std::string> memory;
    std::deque<PendingRead> reads;
    // Memory requests in the order the top sent them: write flag, address and data.
    std::vector<uint8_t> log_write;
    std::vector<uint32_t> log_addr;
    std::string log_data;
    std::string zero_line;

    explicit Harness(uint64_t seed) : top(new Vtop{&context}), random{seed} {}
    ~Harness() { top->final(); delete top; }

    // One clock period: `drive` has set the inputs for this cycle (clock low); the caller
    // samples outputs between settle() and rise().
    void settle() { top->clk = 0; top->eval(); }
    void rise() { top->clk = 1; top->eval(); ++cycles; }

    void quiet_inputs() {
        top->i_req___05Fvalid = 0;
        top->o_resp___05Fready = 0;
        top->o_mem___05Fready = 0;
        top->i_mem___05Fvalid = 0;
        top->csr___05Fr_stb = 0;
        top->csr___05Fw_stb = 0;
    }

    void reset(int hold) {
        quiet_inputs();
        top->rst = 1;
        for (int i = 0; i < hold; ++i) { settle(); rise(); }
        top->rst = 0;
        reads.clear();  // the memory side is reset with the device; written lines stay
    }
};

}  // namespace

// ------------------------------------------------------------------------------ C interface

extern "C" {

// Result codes of nf_play; Python turns each into an error that names what happened.
enum {
    NF_OK = 0,
    NF_WATCHDOG = 1,         // no transfer for `watchdog` cycles while something was owed
    NF_STRAY_RESPONSE = 2,   // a response beat with no request owed
    NF_LINES_FULL = 3,       // more response lines than the caller made room for
};

void* nf_create(uint64_t seed) { return new Harness(seed); }

void nf_destroy(void* handle) { delete static_cast<Harness*>(handle); }

// Bit offsets and widths of the payload fields, from the manifest, in this order:
// i_req op, addr, worker, data; o_resp status, last, data; o_mem write, addr, data.
void nf_layout(void* handle, int line_bits, const int32_t* fields) {
    auto* h = static_cast<Harness*>(handle);
    h->line_bits = line_bits;
    h->line_bytes = (line_bits + 7) / 8;
    h->zero_line.assign(h->line_bytes, '\0');
    Field* order[] = {&h->req_op, &h->req_addr, &h->req_worker, &h->req_data,
                      &h->resp_status, &h->resp_last, &h->resp_data,
                      &h->mem_write, &h->mem_addr, &h->mem_data};
    for (int i = 0; i < 10; ++i) *order[i] = Field{fields[2 * i], fields[2 * i + 1]};
}

// The top's pipeline, from the manifest: the stage at which a request's response and memory
// request reach the outputs (cycles after its transfer).
void nf_pipeline(void* handle, int response_stage) {
    static_cast<Harness*>(handle)->drain_cycles = 2 * response_stage;
}

void nf_timing(void* handle, double idle, double backpressure, double mem_backpressure,
               int latency_low, int latency_high) {
    auto* h = static_cast<Harness*>(handle);
    h->idle = idle;
    h->backpressure = backpressure;
    h->mem_backpressure = mem_backpressure;
    h->latency_low = latency_low;
    h->latency_high = latency_high;
}

uint64_t nf_cycles(void* handle) { return static_cast<Harness*>(handle)->cycles; }

void nf_reset(void* handle, int hold) { static_cast<Harness*>(handle)->reset(hold); }

// Advance `count` cycles with every interface quiet (the clearing sweep after reset).
void nf_idle(void* handle, int count) {
    auto* h = static_cast<Harness*>(handle);
    h->quiet_inputs();
    for (int i = 0; i < count; ++i) { h->settle(); h->rise(); }
}

// A register write: its strobe, then one cycle for the side effects that start after it.
void nf_csr_write(void* handle, uint32_t addr, uint32_t value) {
    auto* h = static_cast<Harness*>(handle);
    h->quiet_inputs();
    h->top->csr___05Faddr = addr;
    h->top->csr___05Fw_data = value;
    h->top->csr___05Fw_stb = 1;
    h->settle(); h->rise();
    h->top->csr___05Fw_stb = 0;
    h->settle(); h->rise();
}

// A register read: one cycle with the strobe, then one more: the address match is
// registered, then the read data.
uint32_t nf_csr_read(void* handle, uint32_t addr) {
    auto* h = static_cast<Harness*>(handle);
    h->quiet_inputs();
    h->top->csr___05Faddr = addr;
    h->top->csr___05Fr_stb = 1;
    h->settle(); h->rise();
    h->top->csr___05Fr_stb = 0;
    h->settle(); h->rise();
    h->settle();
    return h->top->csr___05Fr_data;
}

// 1 and the line when `addr` was written, 0 otherwise.
int nf_mem_peek(void* handle, uint32_t addr, uint8_t* line) {
    auto* h = static_cast<Harness*>(handle);
    auto found = h->memory.find(addr);
    if (found == h->memory.end()) return 0;
    std::memcpy(line, found->second.data(), h->line_bytes);
    return 1;
}

int64_t nf_mem_size(void* handle) {
    return static_cast<int64_t>(static_cast<Harness*>(handle)->memory.size());
}

// Every written address, in no particular order (room for nf_mem_size entries).
void nf_mem_addresses(void* handle, uint32_t* out) {
    auto* h = static_cast<Harness*>(handle);
    for (const auto& entry : h->memory) *out++ = entry.first;
}

void nf_mem_clear(void* handle) { static_cast<Harness*>(handle)->memory.clear(); }

int64_t nf_log_size(void* handle) {
    return static_cast<int64_t>(static_cast<Harness*>(handle)->log_addr.size());
}

// The memory requests logged since the last call, then forgets them.
void nf_log_take(void* handle, uint8_t* write, uint32_t* addr, uint8_t* data) {
    auto* h = static_cast<Harness*>(handle);
    std::memcpy(write, h->log_write.data(), h->log_write.size());
    std::memcpy(addr, h->log_addr.data(), h->log_addr.size() * sizeof(uint32_t));
    std::memcpy(data, h->log_data.data(), h->log_data.size());
    h->log_write.clear();
    h->log_addr.clear();
    h->log_data.clear();
}

// Play `n` requests and collect their responses in order.
//
// Request i is op[i], addr[i], worker[i] and the line at data + i * line_bytes (ignored by
// reads). Response i gets status[i] and the lines first[i] to first[i + 1] - 1 of `lines`
// (room for `capacity` lines). With `reset_after` set, the reset is asserted for that many
// cycles as soon as the last request is taken, with responses still owed: those are lost,
// and counts[1] says how many arrived. counts receives: requests taken, responses complete,
// response lines, cycles, memory requests.
int nf_play(void* handle, int64_t n, const uint8_t* op, const uint32_t* addr,
            const uint8_t* worker, const uint8_t* data, uint8_t* status, int64_t* first,
            uint8_t* lines, int64_t capacity, int reset_after, uint64_t watchdog,
            int64_t* counts) {
    auto* h = static_cast<Harness*>(handle);
    Vtop* top = h->top;
    const int lb = h->line_bytes;
    int64_t next = 0, answered = 0, beats = 0, mem_requests = 0;
    bool offering = false;
    uint64_t start = h->cycles, quiet = 0;
    // Cycles with nothing owed and nothing on o_mem: a memory write may leave after its
    // response, so the batch ends only after a tail longer than the pipeline.
    int tail = 0;
    int result = NF_OK;
    first[0] = 0;
    h->quiet_inputs();

    while (true) {
        if (next == n && tail > h->drain_cycles) break;
        if (reset_after > 0 && next == n && !offering) break;

        // ---- drive, clock low
        if (!offering && next < n && h->random.uniform() >= h->idle) {
            uint32_t* w = words(top->i_req___05Fpayload);
            put_value(w, h->req_op.offset, h->req_op.width, op[next]);
            put_value(w, h->req_addr.offset, h->req_addr.width, addr[next]);
            put_value(w, h->req_worker.offset, h->req_worker.width, worker[next]);
            put_bits(w, h->req_data.offset, h->req_data.width, data + next * lb);
            offering = true;
        }
        top->i_req___05Fvalid = offering;
        bool resp_ready = h->random.uniform() >= h->backpressure;
        bool mem_ready = h->random.uniform() >= h->mem_backpressure;
        top->o_resp___05Fready = resp_ready;
        top->o_mem___05Fready = mem_ready;
        bool data_valid = !h->reads.empty() && h->reads.front().due <= h->cycles;
        top->i_mem___05Fvalid = data_valid;
        if (data_valid)
            put_line(top->i_mem___05Fpayload,
                     reinterpret_cast<const uint8_t*>(h->reads.front().data.data()), h->line_bits);
        h->settle();

        // ---- sample the settled outputs: what the rising edge will transfer
        bool moved = false;
        if (offering && top->i_req___05Fready) {
            offering = false;
            ++next;
            moved = true;
        }
        if (resp_ready && top->o_resp___05Fvalid) {
            if (answered >= next) { result = NF_STRAY_RESPONSE; break; }
            if (beats >= capacity) { result = NF_LINES_FULL; break; }
            const uint32_t* w = words(top->o_resp___05Fpayload);
            if (first[answered] == beats)
                status[answered] = static_cast<uint8_t>(
                    get_value(w, h->resp_status.offset, h->resp_status.width));
            get_bits(w, h->resp_data.offset, h->resp_data.width, lines + beats * lb);
            ++beats;
            if (get_value(w, h->resp_last.offset, 1)) first[++answered] = beats;
            moved = true;
        }
        if (mem_ready && top->o_mem___05Fvalid) {
            const uint32_t* w = words(top->o_mem___05Fpayload);
            bool write = get_value(w, h->mem_write.offset, 1);
            uint32_t at = static_cast<uint32_t>(get_value(w, h->mem_addr.offset, h->mem_addr.width));
            std::string line(lb, '\0');
            if (write) {
                get_bits(w, h->mem_data.offset, h->mem_data.width,
                         reinterpret_cast<uint8_t*>(&line[0]));
                h->memory[at] = line;
            } else {
                auto found = h->memory.find(at);
                uint64_t due = h->cycles + h->random.between(h->latency_low, h->latency_high);
                h->reads.push_back({due, found == h->memory.end() ? h->zero_line : found->second});
            }
            h->log_write.push_back(write);
            h->log_addr.push_back(at);
            h->log_data += write ? line : h->zero_line;
            ++mem_requests;
            moved = true;
        }
        if (data_valid && top->i_mem___05Fready) {
            h->reads.pop_front();
            moved = true;
        }
        bool owed = answered < next || offering;
        tail = (!owed && h->reads.empty() && !top->o_mem___05Fvalid) ? tail + 1 : 0;
        h->rise();

        quiet = moved ? 0 : quiet + 1;
        if (quiet > watchdog && (answered < next || offering)) { result = NF_WATCHDOG; break; }
    }
    h->quiet_inputs();
    if (result == NF_OK && reset_after > 0) h->reset(reset_after);
    counts[0] = next;
    counts[1] = answered;
    counts[2] = beats;
    counts[3] = static_cast<int64_t>(h->cycles - start);
    counts[4] = mem_requests;
    return result;
}

}  // extern "C"
