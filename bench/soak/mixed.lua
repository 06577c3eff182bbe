-- mixed.lua - wrk script for the soak (bench/soak/soak.py): a mix of operators, dtypes, shapes
-- and both encodings, each request drawn at random from a table built once per thread.
--
-- Every answer is checked for what can be checked without knowing which request it answers
-- (wrk does not say): a 200 to a binary request carries X-Normd-Shape and X-Normd-Dtype, and its
-- body must be exactly that many elements of that dtype; a 200 to a JSON request is a JSON object
-- with "shape". Anything else that is not a 200 is counted by status. done() prints one line:
--   SOAKWRK requests=N rps=F p50_us=F p99_us=F non2xx=N bad=N socket_errors=N

-- op, dtype, shape, extra query, weight (relative frequency), json (0/1)
local mix = {
   {"layernorm",   "float16",  {8, 4096},      "",                 6, 0},
   {"rmsnorm",     "bfloat16", {1, 4096},      "",                 6, 0},
   {"softmax",     "float32",  {16, 1000},     "",                 4, 0},
   {"log_softmax", "float32",  {4, 8, 64},     "&axis=1",          3, 0},
   {"prelu",       "float32",  {2, 16, 100},   "&alpha=channel",   3, 0},
   {"layernorm",   "float32",  {64, 4096},     "",                 1, 0},  -- 1 MiB each way
   {"rmsnorm",     "float32",  {32, 512},      "&affine=1",        2, 0},
   {"softmax",     "float16",  {32, 32},       "",                 2, 1},  -- JSON
   {"layernorm",   "float32",  {4, 256},       "",                 2, 1},  -- JSON
}

local esize = {float32 = 4, float16 = 2, bfloat16 = 2}

-- One element's bytes, little-endian, of a small finite value (|x| in [1/8, 8), either sign).
local function element(dt)
   local lo = math.random(0, 255)
   local sign = math.random(0, 1) * 128
   if dt == "float16" then
      return string.char(lo, sign + math.random(12 * 4, 17 * 4 + 3))
   elseif dt == "bfloat16" then
      return string.char(lo, sign + math.random(0x3E, 0x40))
   end
   return string.char(math.random(0, 255), lo, math.random(0, 255), sign + math.random(0x3E, 0x40))
end

local function count(shape)
   local n = 1
   for _, d in ipairs(shape) do n = n * d end
   return n
end

local function binary_request(m)
   local op, dt, shape, extra = m[1], m[2], m[3], m[4]
   local n = count(shape)
   local parts = {}
   for i = 1, n do parts[i] = element(dt) end
   if op == "prelu" then -- alpha per channel (dim 1) follows x
      for i = 1, shape[2] do parts[#parts + 1] = element(dt) end
   elseif op == "rmsnorm" and extra:find("affine") then -- weight follows x
      for i = 1, shape[#shape] do parts[#parts + 1] = element(dt) end
   end
   local path = string.format("/v1/%s?shape=%s&dtype=%s%s", op, table.concat(shape, ","), dt, extra)
   return wrk.format("POST", path, {["Content-Type"] = "application/octet-stream"},
                     table.concat(parts))
end

local function json_request(m)
   local op, dt, shape = m[1], m[2], m[3]
   local vals = {}
   for i = 1, count(shape) do vals[i] = string.format("%.3f", (math.random() - 0.5) * 8) end
   local body = string.format('{"shape":[%s],"dtype":"%s","data":[%s]}', table.concat(shape, ","),
                              dt, table.concat(vals, ","))
   return wrk.format("POST", "/v1/" .. op, {["Content-Type"] = "application/json"}, body)
end

local counter = 0
local threads = {}
function setup(thread)
   counter = counter + 1
   thread:set("id", counter)
   threads[#threads + 1] = thread
end

local reqs = {}
bad = 0
statuses = ""
local by_status = {}

function init(args)
   math.randomseed(1000 + (id or 0))
   for _, m in ipairs(mix) do
      for k = 1, m[5] do -- weight: that many copies (each with its own data)
         reqs[#reqs + 1] = m[6] == 1 and json_request(m) or binary_request(m)
      end
   end
end

function request()
   return reqs[math.random(1, #reqs)]
end

function response(status, headers, body)
   if status ~= 200 then
      by_status[status] = (by_status[status] or 0) + 1
      local s = {}
      for code, n in pairs(by_status) do s[#s + 1] = code .. ":" .. n end
      statuses = table.concat(s, ",")
      return
   end
   local shape, dt = headers["X-Normd-Shape"], headers["X-Normd-Dtype"]
   if shape and dt then
      local n = 1
      for d in string.gmatch(shape, "%d+") do n = n * tonumber(d) end
      if #body ~= n * (esize[dt] or 0) then bad = bad + 1 end
   elseif body:sub(1, 9) ~= '{"shape":' then
      bad = bad + 1
   end
end

function done(summary, latency, requests)
   local nbad, merged = 0, {}
   for _, t in ipairs(threads) do
      nbad = nbad + (t:get("bad") or 0)
      local s = t:get("statuses") or ""
      for code, n in string.gmatch(s, "(%d+):(%d+)") do
         merged[code] = (merged[code] or 0) + tonumber(n)
      end
   end
   local codes = {}
   for code, n in pairs(merged) do codes[#codes + 1] = code .. ":" .. n end
   local e = summary.errors
   io.write(string.format(
      "SOAKWRK requests=%d rps=%.1f p50_us=%.1f p99_us=%.1f non2xx=%d bad=%d socket_errors=%d " ..
      "codes=%s\n", summary.requests, summary.requests / (summary.duration / 1e6),
      latency:percentile(50), latency:percentile(99), e.status, nbad,
      e.connect + e.read + e.write + e.timeout, table.concat(codes, ",")))
end
