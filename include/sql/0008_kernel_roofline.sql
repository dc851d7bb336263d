-- v8: kernel rows against the hardware's roofline (kernels/moe/bench_moe.py prints them; other tables leave NULL).

ALTER TABLE kernel_results ADD COLUMN kernel_ms DOUBLE PRECISION;      -- device time of the kernels alone (profiler)
ALTER TABLE kernel_results ADD COLUMN experts INTEGER;                 -- distinct experts the routing touched
ALTER TABLE kernel_results ADD COLUMN bytes_read DOUBLE PRECISION;     -- weights of those experts + activations
ALTER TABLE kernel_results ADD COLUMN gbps DOUBLE PRECISION;           -- achieved, 1e9 bytes/s
ALTER TABLE kernel_results ADD COLUMN tflops DOUBLE PRECISION;         -- achieved, 1e12 flop/s
ALTER TABLE kernel_results ADD COLUMN roofline_ms DOUBLE PRECISION;    -- max(bytes / peak bandwidth, flops / peak compute)
ALTER TABLE kernel_results ADD COLUMN pct_roofline DOUBLE PRECISION;   -- 100 * roofline_ms / ms_per_call
ALTER TABLE kernel_results ADD COLUMN pct_copy_bw DOUBLE PRECISION;    -- 100 * gbps / measured copy bandwidth
ALTER TABLE kernel_results ADD COLUMN bound TEXT;                      -- memory | compute
