-- decide.lua decides requests against their limits inside Redis, in one
-- atomic step. It is the twin of package rate's Step (rate/bucket.go and
-- rate/window.go): the same arithmetic, line by line, so the Redis store and
-- the memory store decide alike to the last token.
--
-- KEYS[i]  the state of request i.
-- ARGV[1]  now in microseconds, or "" to read the server's TIME. Only
--          tests pin it; keys then get no expiry, since Redis would expire
--          them on its own clock.
-- ARGV[2 + 8(i-1) ...]  request i: algorithm, count, period (µs), burst,
--          calendar, cost, max delay (µs), and 1 if request i is the last
--          of its group (0 otherwise).
--
-- The requests of a group are decided all or nothing: every new state is
-- computed first and written only if all of them allow. Groups are
-- independent of one another: the store sends several groups in one call
-- when it coalesces the decisions of concurrent callers.
--
-- Returns five integers per request: allowed (1 or 0), remaining, reset
-- after (µs), retry after (µs), delay (µs).
--
-- Numbers. Lua numbers are doubles. Every value here is an integer below
-- 2^53 (rate.Limit.Validate keeps counts and bursts times periods below
-- 2^52, and microseconds since the epoch are near 2^51), so sums, products
-- and comparisons are exact. Division is not: a/b rounds to the nearest
-- double. math.floor(a/b) is still exact while |a| < 2^53, but fdiv checks
-- the remainder anyway, so no result rests on that argument alone. Lua's %
-- is a - floor(a/b)*b and is never used: the steps need floor division
-- (rate's floorDiv) and, for negative times, Go's truncation would differ.
--
-- State. A key holds its algorithm's number followed by the state's fields,
-- as decimal integers separated by spaces, e.g. "0 1700000015333333 1 1700000015000000"
-- for gcra. The bucket and window states always have three fields (unused
-- ones 0); a sliding log has as many as it needs. A state written by another algorithm reads as fresh. A fresh state
-- is never stored: the key is deleted, and otherwise it expires when the
-- state would be fresh again (the decision's reset after).

local GCRA, TOKEN_BUCKET, LEAKY_BUCKET, FIXED_WINDOW, SLIDING_WINDOW, SLIDING_LOG = 0, 1, 2, 3, 4, 5
local MONTH = 1
local DAY = 86400000000

local floor, max, tonumber = math.floor, math.max, tonumber
local format, gmatch, match, concat = string.format, string.gmatch, string.match, table.concat

-- fdiv returns ⌊a/b⌋ for b > 0 (rate's floorDiv).
local function fdiv(a, b)
	local q = floor(a / b)
	local r = a - q * b
	if r < 0 then
		q = q - 1
	elseif r >= b then
		q = q + 1
	end
	return q
end

-- cdiv returns ⌈a/b⌉ for b > 0 (rate's ceilDiv).
local function cdiv(a, b)
	return -fdiv(-a, b)
end

-- Instants µs + rem/N are pairs (us, rem), as rate's pt.

local function less(aus, arem, bus, brem)
	return aus < bus or (aus == bus and arem < brem)
end

-- add_ticks returns (us, rem) + t/n for t ≥ 0.
local function add_ticks(us, rem, t, n)
	local q = fdiv(t, n)
	local r = rem + (t - q * n)
	us = us + q
	if r >= n then
		r = r - n
		us = us + 1
	end
	return us, r
end

-- ceil_sub returns ⌈a − b⌉ in microseconds.
local function ceil_sub(aus, arem, bus, brem)
	local d = aus - bus
	if arem > brem then
		d = d + 1
	end
	return d
end

-- remaining_ticks returns how many whole units fit between at and full.
local function remaining_ticks(fus, frem, aus, arem, n, t)
	if not less(aus, arem, fus, frem) then
		return 0
	end
	return fdiv((fus - aus) * n + frem - arem, t)
end

-- Each step takes the state s (an array, empty when fresh) and returns the
-- state to commit if allowed (nil for fresh), allowed, remaining, reset,
-- retry and delay, all in µs. On refusal the state is not written at all.

local function gcra(alg, s, now, cost, n, t, b, maxdelay)
	local at = max(now, s[3] or 0)
	local tus, trem = s[1] or 0, s[2] or 0
	local bus, brem = tus, trem
	if less(bus, brem, at, 0) then
		bus, brem = at, 0
	end
	local fus, frem = add_ticks(at, 0, b * t, n)
	local nus, nrem = add_ticks(bus, brem, cost * t, n)
	local allowed = not less(fus, frem, nus, nrem)
	local retry, delay = 0, 0
	if alg == LEAKY_BUCKET then
		delay = ceil_sub(bus, brem, now, 0)
		if maxdelay > 0 and delay > maxdelay then
			allowed = false
			retry = delay - maxdelay
		end
	end
	if not allowed then
		retry = max(retry, ceil_sub(nus, nrem, fus, frem) + at - now)
		return nil, 0, remaining_ticks(fus, frem, bus, brem, n, t), max(0, ceil_sub(tus, trem, now, 0)), retry, 0
	end
	local remaining = remaining_ticks(fus, frem, nus, nrem, n, t)
	local reset = max(0, ceil_sub(nus, nrem, now, 0))
	if not less(at, 0, nus, nrem) then
		return nil, 1, remaining, reset, 0, delay
	end
	return { nus, nrem, at }, 1, remaining, reset, 0, delay
end

local function token_bucket(s, now, cost, n, t, b)
	local capacity = b * t
	local debt, last = s[1] or 0, s[2] or 0
	local shift = max(0, last - now)
	local e = now - last
	if e > 0 then
		if e >= cdiv(debt, n) then
			debt = 0
		else
			debt = debt - e * n
		end
		last = now
	end
	local level = capacity - debt
	local need = cost * t
	if level < need then
		return nil, 0, fdiv(level, t), cdiv(debt, n) + shift, cdiv(need - level, n) + shift, 0
	end
	debt = debt + need
	local remaining, reset = fdiv(capacity - debt, t), cdiv(debt, n) + shift
	if debt == 0 then
		return nil, 1, remaining, reset, 0, 0
	end
	return { debt, last }, 1, remaining, reset, 0, 0
end

-- days_from_civil and civil_from_days convert between days since the Unix
-- epoch and proleptic Gregorian dates (H. Hinnant's algorithms).
local function days_from_civil(y, m, d)
	if m <= 2 then
		y = y - 1
	end
	local era = fdiv(y, 400)
	local yoe = y - era * 400
	local mp = m > 2 and m - 3 or m + 9
	local doy = fdiv(153 * mp + 2, 5) + d - 1
	local doe = yoe * 365 + fdiv(yoe, 4) - fdiv(yoe, 100) + doy
	return era * 146097 + doe - 719468
end

local function civil_from_days(z)
	z = z + 719468
	local era = fdiv(z, 146097)
	local doe = z - era * 146097
	local yoe = fdiv(doe - fdiv(doe, 1460) + fdiv(doe, 36524) - fdiv(doe, 146096), 365)
	local y = yoe + era * 400
	local doy = doe - (365 * yoe + fdiv(yoe, 4) - fdiv(yoe, 100))
	local mp = fdiv(5 * doy + 2, 153)
	local m = mp < 10 and mp + 3 or mp - 9
	if m <= 2 then
		y = y + 1
	end
	return y, m
end

-- window returns the start and end of the window holding now.
local function window(now, t, cal)
	if cal == MONTH then
		local y, m = civil_from_days(fdiv(now, DAY))
		local ny, nm = y, m + 1
		if nm > 12 then
			ny, nm = y + 1, 1
		end
		return days_from_civil(y, m, 1) * DAY, days_from_civil(ny, nm, 1) * DAY
	end
	local start = fdiv(now, t) * t
	return start, start + t
end

local function fixed_window(s, now, cost, n, t, cal)
	local start, stop = window(now, t, cal)
	local sa, sb = s[1] or 0, s[2] or 0
	local count = 0
	if sa == start then
		count = sb
	elseif sa > start and sb > 0 then
		start, count = sa, sb
		local _
		_, stop = window(start, t, cal)
	end
	if count + cost > n then
		return nil, 0, n - count, stop - now, stop - now, 0
	end
	count = count + cost
	if count == 0 then
		return nil, 1, n - count, 0, 0, 0
	end
	return { start, count }, 1, n - count, stop - now, 0, 0
end

local function sliding_reset(start, now, t, cur, prev)
	if cur > 0 then
		return start + 2 * t - now
	elseif prev > 0 then
		return start + t - now
	end
	return 0
end

local function sliding_retry(start, now, cur, prev, cost, n, t)
	local room = n - cur - cost
	if room >= 0 and prev > 0 then
		local e = cdiv((prev - room) * t, prev)
		if e < t then
			return max(0, start + e - now)
		end
	end
	local nxt = start + t
	local k = cur - (n - cost)
	if k <= 0 or cur == 0 then
		return nxt - now
	end
	return nxt + cdiv(k * t, cur) - now
end

local function sliding_window(s, now, cost, n, t)
	local start = fdiv(now, t) * t
	local sa, sb, sc = s[1] or 0, s[2] or 0, s[3] or 0
	local cur, prev = 0, 0
	if sa == start then
		cur, prev = sb, sc
	elseif sa == start - t then
		prev = sb
	elseif sa > start then
		start, cur, prev = sa, sb, sc
	end
	local e = max(0, now - start)
	local weighted = prev - fdiv(prev * e, t)
	if cur + cost + weighted > n then
		return nil, 0, max(0, n - cur - weighted), sliding_reset(start, now, t, cur, prev),
			sliding_retry(start, now, cur, prev, cost, n, t), 0
	end
	cur = cur + cost
	local remaining, reset = n - cur - weighted, sliding_reset(start, now, t, cur, prev)
	if cur == 0 and prev == 0 then
		return nil, 1, remaining, reset, 0, 0
	end
	return { start, cur, prev }, 1, remaining, reset, 0, 0
end

-- The sliding log is kept as runs: s = { t1, n1, t2, n2, ... } means n1
-- units admitted at t1, then n2 at t2, with t1 < t2 < ...; rate's Log
-- holds the same times one per unit.
local function sliding_log(s, now, cost, n, t)
	local first = 1
	while first < #s and now - s[first] >= t do
		first = first + 2
	end
	local total = 0
	for j = first + 1, #s, 2 do
		total = total + s[j]
	end
	if total + cost > n then
		local k = total + cost - n -- units that must leave first
		local at, seen = 0, 0
		for j = first, #s, 2 do
			seen = seen + s[j + 1]
			if seen >= k then
				at = s[j]
				break
			end
		end
		return nil, 0, max(0, n - total), s[#s - 1] + t - now, at + t - now, 0
	end
	local remaining = n - total - cost
	if total == 0 and cost == 0 then
		return nil, 1, remaining, 0, 0, 0
	end
	local log = {}
	for j = first, #s do
		log[#log + 1] = s[j]
	end
	if cost > 0 then
		local at = now
		if #log > 0 then
			at = max(at, log[#log - 1])
		end
		if #log > 0 and log[#log - 1] == at then
			log[#log] = log[#log] + cost
		else
			log[#log + 1] = at
			log[#log + 1] = cost
		end
	end
	return log, 1, remaining, log[#log - 1] + t - now, 0, 0
end

-- load reads the state of key for algorithm alg: fields as an array, empty
-- when the key is missing or holds another algorithm's state.
local function load(key, alg)
	local raw = redis.call('GET', key)
	if not raw then
		return {}
	end
	local stored, rest = match(raw, '^(%d+) (.*)$')
	if tonumber(stored) ~= alg then
		return {}
	end
	if alg == SLIDING_LOG then
		local s = {}
		for w in gmatch(rest, '%S+') do
			s[#s + 1] = tonumber(w)
		end
		return s
	end
	local a, b, c = match(rest, '^(%-?%d+) (%-?%d+) (%-?%d+)$')
	return { tonumber(a), tonumber(b), tonumber(c) }
end

-- store writes state s of algorithm alg to key, expiring after reset µs,
-- or deletes key when s is nil (fresh).
local function store(key, alg, s, reset, expire)
	if s == nil then
		redis.call('DEL', key)
		return
	end
	local v
	if alg == SLIDING_LOG then
		local parts = { format('%d', alg) }
		for j = 1, #s do
			parts[j + 1] = format('%d', s[j])
		end
		v = concat(parts, ' ')
	else
		v = format('%d %d %d %d', alg, s[1], s[2], s[3] or 0)
	end
	if expire then
		redis.call('SET', key, v, 'PX', max(1, cdiv(reset, 1000)))
	else
		redis.call('SET', key, v)
	end
end

-- step decides the request whose arguments start at ARGV[a] against state s.
local function step(alg, s, now, cost, a)
	local n, t, b = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
	if b <= 0 then
		b = n
	end
	if alg == GCRA or alg == LEAKY_BUCKET then
		return gcra(alg, s, now, cost, n, t, b, tonumber(ARGV[a + 6]))
	elseif alg == TOKEN_BUCKET then
		return token_bucket(s, now, cost, n, t, b)
	elseif alg == FIXED_WINDOW then
		return fixed_window(s, now, cost, n, t, tonumber(ARGV[a + 4]))
	elseif alg == SLIDING_WINDOW then
		return sliding_window(s, now, cost, n, t)
	elseif alg == SLIDING_LOG then
		return sliding_log(s, now, cost, n, t)
	end
	return error('sluice: unknown algorithm ' .. tostring(ARGV[a]))
end

local now = tonumber(ARGV[1])
local expire = now == nil
if expire then
	local tm = redis.call('TIME')
	now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
end

local out = {}

-- put records the decision of request i.
local function put(i, allowed, remaining, reset, retry, delay)
	local o = 5 * (i - 1)
	out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = allowed, remaining, reset, retry, delay
end

-- decide_one decides a group of one request: the common case, and every
-- group of a coalesced call.
local function decide_one(i)
	local key, a = KEYS[i], 2 + 8 * (i - 1)
	local alg = tonumber(ARGV[a])
	local new, allowed, remaining, reset, retry, delay = step(alg, load(key, alg), now, tonumber(ARGV[a + 5]), a)
	put(i, allowed, remaining, reset, retry, delay)
	if allowed == 1 then
		store(key, alg, new, reset, expire)
	end
end

-- decide_group decides requests first..last all or nothing. A key named
-- twice sees the state the earlier step left.
local function decide_group(first, last)
	local before, pending, news, resets = {}, {}, {}, {}
	local ok = true
	for i = first, last do
		local key, a = KEYS[i], 2 + 8 * (i - 1)
		local alg = tonumber(ARGV[a])
		if before[key] == nil then
			before[key] = load(key, alg)
		end
		local s = pending[key] or before[key]
		local new, allowed, remaining, reset, retry, delay = step(alg, s, now, tonumber(ARGV[a + 5]), a)
		put(i, allowed, remaining, reset, retry, delay)
		if allowed == 1 then
			pending[key] = new or {}
		else
			ok = false
		end
		news[i], resets[i] = new, reset
	end
	for i = first, last do
		local key, a = KEYS[i], 2 + 8 * (i - 1)
		local alg = tonumber(ARGV[a])
		if ok then
			store(key, alg, news[i], resets[i], expire)
		elseif out[5 * (i - 1) + 1] == 1 then
			-- Nothing is consumed: a request that would have passed alone
			-- reports what is left without it.
			local _, _, remaining, reset = step(alg, before[key], now, 0, a)
			out[5 * (i - 1) + 2], out[5 * (i - 1) + 3] = remaining, reset
		end
	end
end

local first = 1
for i = 1, #KEYS do
	if ARGV[2 + 8 * (i - 1) + 7] == '1' then
		if i == first then
			decide_one(i)
		else
			decide_group(first, i)
		end
		first = i + 1
	end
end
return out
