-- post_json.lua - wrk script: POSTs one JSON normd request, over and over; post_binary.lua's
-- counterpart, for comparing the two forms in one session.
--
-- The request is chosen by environment variables (wrk passes none of its own to scripts):
--   NORMD_OP     layernorm | rmsnorm | softmax | log_softmax   (default layernorm)
--   NORMD_DTYPE  float32 | float16                             (default float32)
--   NORMD_SHAPE  comma-separated shape                         (default 8,1024)
--   NORMD_PROTO  v1 (/v1/{op}: {"shape","dtype","data"}) | v2 (KServe v2, x as a JSON tensor,
--                y answered as JSON)
--   NORMD_DIGITS significant digits per number (default 9: numpy's float32 repr, or printf
--                "%.9g"; 17 is what Python's json.dumps writes for x.tolist())
-- x holds random values of either sign, |x| in [1/8, 8) like post_binary.lua's, written with
-- "%.<digits>g"; every wrk thread builds its own body once, in init.
--
-- done() prints one parseable line, as post_binary.lua does:
--   RESULT requests=N duration_us=N rps=F p50_us=F p90_us=F p99_us=F max_us=F
--          connect_errors=N read_errors=N write_errors=N timeouts=N non2xx=N req_bytes=N p999_us=F

local op = os.getenv("NORMD_OP") or "layernorm"
local dtype = os.getenv("NORMD_DTYPE") or "float32"
local shape = os.getenv("NORMD_SHAPE") or "8,1024"
local proto = os.getenv("NORMD_PROTO") or "v1"
local digits = tonumber(os.getenv("NORMD_DIGITS") or "9")

local elems = 1
for d in string.gmatch(shape, "%d+") do
   elems = elems * tonumber(d)
end

local function make_data(seed)
   math.randomseed(seed)
   local fmt = "%." .. digits .. "g"
   local parts = {}
   for i = 1, elems do
      local v = 2 ^ (math.random() * 6 - 3) -- [1/8, 8)
      if math.random(0, 1) == 1 then v = -v end
      parts[i] = string.format(fmt, v)
   end
   return table.concat(parts, ",")
end

local counter = 0
function setup(thread)
   counter = counter + 1
   thread:set("id", counter)
end

local req
local body_bytes = 0
function init(args)
   local data = make_data(12345 + (id or 0))
   local body, path
   if proto == "v2" then
      local v2type = ({float32 = "FP32", float16 = "FP16"})[dtype]
      body = string.format('{"inputs":[{"name":"x","shape":[%s],"datatype":"%s","data":[%s]}],' ..
                           '"outputs":[{"name":"y"}]}', shape, v2type, data)
      path = "/v2/models/" .. op .. "/infer"
   else
      body = string.format('{"shape":[%s],"dtype":"%s","data":[%s]}', shape, dtype, data)
      path = "/v1/" .. op
   end
   body_bytes = #body
   req = wrk.format("POST", path, {["Content-Type"] = "application/json"}, body)
end

function request()
   return req
end

function done(summary, latency, requests)
   -- done() runs in its own Lua state: measure a body of the same form here
   if body_bytes == 0 then init({}) end
   local e = summary.errors
   io.write(string.format(
      "RESULT requests=%d duration_us=%d rps=%.1f p50_us=%.1f p90_us=%.1f p99_us=%.1f max_us=%.1f " ..
      "connect_errors=%d read_errors=%d write_errors=%d timeouts=%d non2xx=%d req_bytes=%d " ..
      "p999_us=%.1f\n",
      summary.requests, summary.duration, summary.requests / (summary.duration / 1e6),
      latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
      e.connect, e.read, e.write, e.timeout, e.status, body_bytes, latency:percentile(99.9)))
end
