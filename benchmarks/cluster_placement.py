"""Where the hardware puts the CTAs of 8-CTA clusters at 3 CTAs a multiprocessor (attention's lagged band's
resources: 128 threads, 67584 B dynamic + 6144 B static shared memory)."""
import collections, sys
import cupy as cp
SRC = r'''
extern "C" __global__ void __cluster_dims__(8, 1, 1) __launch_bounds__(128, 3)
probe(unsigned* sm, unsigned long long* t, long long spin) {
    extern __shared__ unsigned char dyn[];
    __shared__ float stat[1536];
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    unsigned long long g0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g0));
    stat[threadIdx.x] = (float)s; dyn[threadIdx.x] = (unsigned char)s;
    const long long c0 = clock64();
    while (clock64() - c0 < spin) {}
    __syncthreads();
    if (threadIdx.x == 0) { sm[blockIdx.x] = s; t[blockIdx.x] = g0; }
    if (stat[(threadIdx.x + 1) % 128] == -1.0f && dyn[(threadIdx.x + 3) % 128] == 7) sm[0] = 0xffffffffu;
}
'''
mod = cp.RawModule(code=SRC, options=("-arch=sm_90",))
k = mod.get_function("probe")
k.max_dynamic_shared_size_bytes = 67584
nsm = cp.cuda.Device(0).attributes["MultiProcessorCount"]
for clusters in (44, 45, 46, 33):
    n = clusters * 8
    sm = cp.zeros(n, dtype=cp.uint32); t = cp.zeros(n, dtype=cp.uint64)
    k((n,), (128,), (sm, t, cp.int64(300000)), shared_mem=67584)
    cp.cuda.runtime.deviceSynchronize()
    sm, t = sm.get(), t.get()
    t = (t - t.min()) / 1000.0
    first = t < 50  # started in the first wave (spin is about 170 us)
    per = collections.Counter(sm[first].tolist())
    hist = collections.Counter(per.get(i, 0) for i in range(nsm))
    print(f"{clusters} clusters ({n} CTAs): first wave {first.sum()} CTAs; SMs by CTAs held: "
          + ", ".join(f"{c} CTAs: {hist[c]}" for c in sorted(hist)) + f"; later starts {sorted(set(t[~first].round(0)))[:5]}")
