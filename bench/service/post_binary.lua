-- post_binary.lua - wrk script: POSTs one raw binary normd request, over and over.
--
-- The request is chosen by environment variables (wrk passes none of its own to scripts):
--   NORMD_OP     layernorm | rmsnorm | softmax | log_softmax   (default layernorm)
--   NORMD_DTYPE  float16 | bfloat16 | float32                  (default float16)
--   NORMD_SHAPE  comma-separated shape                         (default 8,4096)
--   NORMD_PROTO  v1 (raw binary, /v1/{op}) | v2 (KServe v2 with binary tensors:
--                Inference-Header-Content-Length, a JSON header, then x; y asked in binary)
--                | v2shm (KServe v2 with x and y in system shared memory: the body is JSON
--                alone, x is read from region bench_in at offset 0 and each wrk thread's y goes
--                to its own slot of region bench_out; the caller creates and registers both,
--                see two_gpus.sh, and names bench_in's file in NORMD_SHM_IN_FILE, which the
--                script fills with x before the first request)
--                | v2cudashm (the same body, with bench_in and bench_out CUDA shared memory
--                regions: device memory that bench/cudashm_hold fills and holds, see
--                latency.sh)
-- x is random bytes shaped into small finite values (|x| in [1/8, 8), either sign), so no NaN or
-- infinity reaches the kernels; every wrk thread builds its own body once, in init.
--
-- done() prints one parseable line:
--   RESULT requests=N duration_us=N rps=F p50_us=F p90_us=F p99_us=F max_us=F
--          connect_errors=N read_errors=N write_errors=N timeouts=N non2xx=N req_bytes=N p999_us=F
-- and, when NORMD_LATENCY_CURVE names a file, writes the latency by percentile there as CSV
-- (percentile,latency_us): 0 to 99.999 with ten points a decade of 1 - percentile, then 100 (the
-- maximum). Requests that ran past wrk's --timeout are counted as timeouts and are in neither.

local op = os.getenv("NORMD_OP") or "layernorm"
local dtype = os.getenv("NORMD_DTYPE") or "float16"
local shape = os.getenv("NORMD_SHAPE") or "8,4096"
local proto = os.getenv("NORMD_PROTO") or "v1"

local elems = 1
for d in string.gmatch(shape, "%d+") do
   elems = elems * tonumber(d)
end

-- One element's bytes, little-endian, from two random bytes.
local function element(dt)
   local lo = math.random(0, 255)
   local sign = math.random(0, 1) * 128
   if dt == "float16" then
      -- exponent field 12..17 (bits 14..10): 2^-3 .. 2^2 times 1.mantissa
      return string.char(lo, sign + math.random(12 * 4, 17 * 4 + 3))
   elseif dt == "bfloat16" then
      -- high byte = sign + top 7 of 8 exponent bits: 0x3E..0x40 is 2^-3 .. 2^2 (and a bit)
      return string.char(lo, sign + math.random(0x3E, 0x40))
   else
      -- float32: 0x3E00_0000 .. 0x40FF_FFFF, 2^-3 .. 2^2 (and a bit)
      return string.char(math.random(0, 255), lo, math.random(0, 255),
                         sign + math.random(0x3E, 0x40))
   end
end

local function make_body(seed)
   math.randomseed(seed)
   local parts = {}
   for i = 1, elems do
      parts[i] = element(dtype)
   end
   return table.concat(parts)
end

local counter = 0
function setup(thread)
   counter = counter + 1
   thread:set("id", counter)
   if proto == "v2shm" and counter == 1 then
      local f = assert(io.open(assert(os.getenv("NORMD_SHM_IN_FILE")), "r+b"))
      f:write(make_body(12345))
      f:close()
   end
end

local req
function init(args)
   if proto == "v2shm" or proto == "v2cudashm" then
      local v2type = ({float32 = "FP32", float16 = "FP16", bfloat16 = "BF16"})[dtype]
      local bytes = elems * (dtype == "float32" and 4 or 2)
      local body = string.format(
         '{"inputs":[{"name":"x","shape":[%s],"datatype":"%s","parameters":' ..
         '{"shared_memory_region":"bench_in","shared_memory_byte_size":%d}}],' ..
         '"outputs":[{"name":"y","parameters":{"shared_memory_region":"bench_out",' ..
         '"shared_memory_offset":%d,"shared_memory_byte_size":%d}}]}',
         shape, v2type, bytes, ((id or 1) - 1) * bytes, bytes)
      req = wrk.format("POST", "/v2/models/" .. op .. "/infer",
                       {["Content-Type"] = "application/json"}, body)
      return
   end
   local body = make_body(12345 + (id or 0))
   if proto == "v2" then
      local v2type = ({float32 = "FP32", float16 = "FP16", bfloat16 = "BF16"})[dtype]
      local header = string.format(
         '{"inputs":[{"name":"x","shape":[%s],"datatype":"%s","parameters":{"binary_data_size":%d}}],' ..
         '"outputs":[{"name":"y","parameters":{"binary_data":true}}]}', shape, v2type, #body)
      req = wrk.format("POST", "/v2/models/" .. op .. "/infer",
                       {["Content-Type"] = "application/octet-stream",
                        ["Inference-Header-Content-Length"] = tostring(#header)},
                       header .. body)
   else
      local path = "/v1/" .. op .. "?shape=" .. shape .. "&dtype=" .. dtype
      req = wrk.format("POST", path, {["Content-Type"] = "application/octet-stream"}, body)
   end
end

function request()
   return req
end

function done(summary, latency, requests)
   local e = summary.errors
   io.write(string.format(
      "RESULT requests=%d duration_us=%d rps=%.1f p50_us=%.1f p90_us=%.1f p99_us=%.1f max_us=%.1f " ..
      "connect_errors=%d read_errors=%d write_errors=%d timeouts=%d non2xx=%d req_bytes=%d",
      summary.requests, summary.duration, summary.requests / (summary.duration / 1e6),
      latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
      e.connect, e.read, e.write, e.timeout, e.status, elems * (dtype == "float32" and 4 or 2)) ..
      string.format(" p999_us=%.1f\n", latency:percentile(99.9)))
   local curve = os.getenv("NORMD_LATENCY_CURVE")
   if curve and curve ~= "" then
      local f = assert(io.open(curve, "w"))
      f:write("percentile,latency_us\n")
      for k = 0, 50 do
         local p = 100 * (1 - 10 ^ (-k / 10))
         f:write(string.format("%.6f,%.1f\n", p, latency:percentile(p)))
      end
      f:write(string.format("100,%.1f\n", latency.max))
      f:close()
   end
end
