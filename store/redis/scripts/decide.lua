-- decide.lua decides requests against their limits inside Redis, in one
-- atomic step. It is the twin of package rate's Step (rate/bucket.go and
-- rate/window.go): the same arithmetic, line by line, so the Redis store and
-- the memory store decide alike to the last token.
--
-- KEYS[i]  the state of request i.
-- ARGV[1]  now in microseconds, or "" to read the server's TIME. Only
--          tests pin it; keys then get no expiry, since Redis would expire
--          them on its own clock.
-- ARGV[8i-6 ... 8i+1]  request i: algorithm, count, period (µs), burst,
--          calendar, cost, max delay (whole µs, rounded down; -1 for no
--          bound, so that 0 bounds a delay to 0), and its group mark: 0
--          if the group goes on with request i+1, 1 if request i ends a
--          group to decide, 2 if it ends a group to check, 3 one to
--          refund, 4 one to commit (see Commits and refunds).
-- ARGV[8n+2i], ARGV[8n+2i+1]  (n = #KEYS) in a call with a group to
--          refund: request i's receipt, as its commit returned it. The
--          store sends a group to refund in a call of its own.
--
-- The requests of a group are decided all or nothing: every new state is
-- computed first and written only if all of them allow. Groups are
-- independent of one another: the store sends several groups in one call
-- when it coalesces the decisions of concurrent callers. A group to check
-- is stepped the same way and writes nothing: each request reports whether
-- it would pass, as if the whole were refused (see below). The store checks
-- the groups of a request whose keys span several cluster slots before it
-- decides them.
--
-- Returns five integers per request: allowed (1 or 0), remaining, reset
-- after (µs), retry after (µs), delay (µs). When a group is refused (or
-- only checked), a request that would have passed alone reports the
-- remaining and reset after of a step of cost 0: what is left without it.
-- A group to commit returns, after its requests' five integers, two per
-- request: its receipt (0, 0 if the group was refused).
--
-- Commits and refunds. The store decides a request whose keys span
-- several cluster slots in phases: it checks every slot's group, then
-- commits them slot by slot, stopping at the first refusal, and gives
-- back to the groups committed before a refusal what their commits took.
-- A commit (mark 4) decides as mark 1 does, and returns for each request
-- a receipt: where its units went, as the state it wrote tells.
--
--   gcra, leaky_bucket  the latest time seen (the state's C) and the debt
--                       left, (TAT − C)·n ticks
--   token_bucket        the last refill and the debt left, in ticks
--   fixed_window        the window counted in: its start and its end (µs)
--   sliding_window      the start of the window counted in, 0
--   sliding_log         the time the units were logged at, 0
--
-- A refund (mark 3) takes each request's cost back out of the state it
-- finds, then checks the group as mark 2 does, which reports what is left
-- without the request. It gives back what the commit took as far as the
-- state shows it is still there, and never more: the key is left no
-- fresher than had the commit been a step of cost 0, whatever other steps
-- decided on it in between (for a key decided under one limit; but see
-- What a refund cannot tell).
--
--   Windows: a count is additive. If the state's window is still the one
--   the commit counted in, its count loses the cost; for sliding_window,
--   if it has moved on by exactly one window, the previous count does.
--   Otherwise the units left with their window.
--   sliding_log: the run logged at the receipt's time loses the cost. A
--   log without that run has let the units expire.
--   Buckets, at the commit's instant: while the state's C is still the
--   receipt's, every step since the commit, others' commits and refunds
--   alike, was at that instant (one at a later instant moves C on; one at
--   an earlier instant counts from C), where a bucket neither refills nor
--   spills: its debt, (T − C)·n, is a sum. Each step added its cost·I,
--   and each refund took out what it gave, never more than its own
--   request's cost·I nor than the debt. So the debt holds the request's
--   cost·I, unless refunds of commits made before it took out units
--   their own commits no longer held (a refund of a commit at an earlier
--   instant may, below), and then what is left of them. The refund takes
--   out min(cost·I, Tc − C, the debt): refunds at the commits' instant
--   leave the key, in whatever order they come, as had their requests
--   been steps of cost 0; and none leaves a debt below zero.
--   Buckets, after a later instant: the commit left the TAT at Tc = C +
--   debt/n, and P = Tc − cost·I would be the TAT without it. Each step
--   since, at an instant a no earlier than the commit's C and no later
--   than the C now stored, moved the TAT to max(TAT, a) + its cost·I. So,
--   if the others' steps only added, the TAT now is T ≥ Tc + S (S: the
--   others' costs, as time), while without the commit it would be the
--   largest of P + S and, for each step since, its a plus the costs from
--   that step on: at most max(P, C) + S, which is at most T − min(cost·I,
--   Tc − C). The refund moves the TAT back by that much: by all of cost·I
--   unless a step at a later instant than the commit found the bucket,
--   without the request, full; what the bucket would have refilled past
--   full up to C is not given back. A token_bucket is the same with T =
--   last refill + debt/n, and C its last refill. A state whose C is
--   earlier than the receipt's, or, past the commit's instant, whose TAT
--   is earlier than Tc, is not one the commit's state has become (the key
--   was reset since, or see What a refund cannot tell), and gets nothing.
--
-- A refunded state that a step of cost 0 at now would find fresh is
-- deleted, as that step would delete it; any other is written with the
-- expiry a step gives it. A refund on a key that holds anything else, or
-- nothing, changes nothing.
--
-- What a refund cannot tell: it knows the commit's state, as others'
-- steps changed it, by instants that only move forward while the key
-- exists (a bucket's C, a window's start, a log's last run). A key that
-- became fresh after the commit (expired, or deleted by a step or a
-- Reset) and was written anew at an instant before that, by a master
-- whose clock stepped back, or at the very microsecond of the commit,
-- may look like it, and lose up to the cost from what others took. Nor
-- does a bucket's state tell which refunds took what. After a step at a
-- later instant than the commit, a refund still trusts T ≥ Tc + S: a
-- refund of a commit made before this one, in between, breaks it. If the
-- TAT is then below Tc, the refund gives nothing, though the request's
-- units may be there (raced requests refunded in the order of their
-- commits, with others' steps in between at later instants, lose units
-- so); if others' steps brought it back above, the refund may give back
-- what those units were to refill past full, up to the request's cost,
-- more than the request's absence would have. Refunds in the reverse
-- order of their commits keep T ≥ Tc + S.
--
-- Cost. The script runs on every decision, so it is written for Redis's
-- CPU, measured in instructions per call: few functions are defined in
-- it, none per key (a local function is a new closure on every call,
-- since the body is itself a function that Redis calls), each step is plain code behind one
-- dispatch on the algorithm, a request's step runs in a loop that serves
-- both the real step and the cost-0 one, a group's mark costs the hot
-- path a comparison and a write a test (commits and refunds are the rare
-- paths), and states are packed binary
-- numbers (struct), not text to parse. Calling a library function costs
-- far more than arithmetic, so the hot paths avoid them: arguments become
-- numbers by arithmetic (ARGV[i] + 0 rather than tonumber), max is an if,
-- and floor(x) is written x - x % 1 (see Numbers).
--
-- Numbers. Lua numbers are doubles. Every value here is an integer below
-- 2^53 (rate.Limit.Validate keeps counts and bursts times periods below
-- 2^52, and microseconds since the epoch are near 2^51), so sums, products
-- and comparisons are exact. (A refused gcra request's next instant, up to
-- now + 2·2^52, is not, nor is a sliding window's end, up to two periods
-- past its start: the retry and the reset take differences first.)
-- Division is not: a/b rounds to the nearest double. But floor(a/b) is
-- exact for integers |a| < 2^53 and b > 0: if b does not divide a, a/b
-- lies at least 1/b from the integers around it, while rounding moves it
-- by at most half an ulp, |a/b|·2^-53 < 1/b; so floor(a/b) is rate's floorDiv
-- and ceil(a/b) its ceilDiv, for negative times too. For a double
-- |x| < 2^52, Lua's x % 1 is x - floor(x) (its definition,
-- a - floor(a/b)*b, with b = 1), which is exact, and so is
-- x - x % 1 = floor(x). Otherwise % only checks a string's length. A
-- refund compares products that may pass 2^53 (a time difference times a
-- count) with exact integers: rounding is monotonic, so each comparison
-- keeps its sense.
--
-- State. A key holds its algorithm's number as one byte followed by
-- big-endian float64s: three for the bucket and window states (unused ones
-- 0), and for a sliding log a pair (time, units) per run of units admitted
-- at the same time, oldest first. Anything else (another algorithm's
-- state, a text state of an earlier version, a value of the wrong length,
-- or a key of another type, such as a list) reads as fresh, and the next
-- decision that writes replaces it. So does a value in this format whose
-- numbers the script never writes: every field it writes is an integer
-- in [0, 2^53) (times since the epoch, counts, debts and fractions; see
-- Numbers), and a log's runs have strictly increasing times and at least
-- one unit each. Anything else (an infinity, a NaN, a negative count, a
-- run out of order), left by another program, a restore or a key
-- collision, would otherwise fail every decision on the key for good (an
-- infinite expiry is no integer to SET ... PX) or admit past the limit (a
-- negative count); as fresh, it is replaced and expires like any state.
-- The check costs the hot path a few comparisons, no library call. A
-- time far ahead of now is valid: it is how a key outlives Redis's clock
-- stepping back. A fresh state is never stored: the key is deleted, and
-- otherwise it expires when the state would be fresh again (the
-- decision's reset after).
--
-- Logs. A sliding log's decision reads every run of its log (to check
-- them, and to count the units in the window), so its cost grows with the
-- runs, up to rate.MaxLogCount; the coalescer weighs it so (coalesce.go).
-- Per run it is kept to a few VM instructions: the log stays the packed
-- string it is stored as, read CHUNK runs per struct.unpack call, and a
-- new log is the old one's bytes from its first run in the window on,
-- with the new units packed onto the end, so an admit copies no run one
-- by one. The bytes are the same as a run-by-run copy's: every number is
-- an integer below 2^53, which a float64 holds exactly. A log in hand is
-- { bytes, period, from, total }: the offset of the first run in that
-- period's window, and the units from there on, which the check that
-- reads the log finds in the same pass and a step's new log knows (all
-- its runs are in the window); a step under another period counts again.

local KEYS, ARGV = KEYS, ARGV
local now = tonumber(ARGV[1])
local expire = now == nil
if expire then
	local tm = redis.call('TIME')
	now = tm[1] * 1000000 + tm[2]
end

local floor, max = math.floor, math.max
local pack, sunpack, byte, type = struct.pack, struct.unpack, string.byte, type
local srep, ssub = string.rep, string.sub

-- 2^53: every field the script writes lies below it (see State).
local BOUND = 9007199254740992
-- MAXEXACT is rate.MaxExact, 2^52: the most debt a bucket keeps, its
-- burst's and a waiting caller's together (rate's queueWait).
local MAXEXACT = 4503599627370496

-- read returns key's value, or false for none. A key of another type
-- (WRONGTYPE) reads as holding none, and so as fresh (see State), rather
-- than failing the call, and with it every group that shares it. Any
-- other failure of GET (an ACL that refuses it) fails the call, as
-- redis.call would: read as fresh, every key would admit every request,
-- and no decision would fail to say so.
local function read(key)
	local raw = redis.pcall('GET', key)
	if type(raw) == 'table' and raw.err then
		if ssub(raw.err, 1, 9) == 'WRONGTYPE' then
			return false
		end
		error(raw)
	end
	return raw
end

-- written reports whether x is a number the script could have written in
-- a state: an integer in [lo, 2^53). NaNs and infinities fail each
-- comparison, and x % 1 == 0 leaves integers alone.
local function written(x, lo)
	return x >= lo and x < BOUND and x % 1 == 0
end

-- state3 reports whether a three-field state holds numbers the script
-- writes.
local function state3(a, b, c)
	return written(a, 0) and written(b, 0) and written(c, 0)
end

-- A sliding log is read CHUNK runs per struct.unpack call, into a table
-- per chunk: a call per run cost most of a decision on a long log (see
-- Logs). RUNS is the format of a whole chunk, made when a log is first
-- read; a chunk's 2·CHUNK values stay far below Lua's C stack limit
-- (LUAI_MAXCSTACK, 8000).
local CHUNK = 128
local RUNS

-- chunk returns how many bytes of a log of len bytes the chunk at offset
-- p holds (a whole chunk, or the rest), and the struct format to read it.
local function chunk(len, p)
	if not RUNS then
		RUNS = '>' .. srep('d', 2 * CHUNK)
	end
	local m = len - p + 1
	if m >= 16 * CHUNK then
		return 16 * CHUNK, RUNS
	end
	return m, ssub(RUNS, 1, 1 + m / 8)
end

-- logok reports whether log, a sliding log's value, holds runs the script
-- writes: times strictly increasing, from 0, and integers below 2^53, each
-- with an integer count of units in [1, 2^53). Increasing, only the first
-- time needs checking against 0 (it must pass -1) and only the last
-- against 2^53 (an infinity fails x % 1 == 0 anyway). Since it reads
-- every run, it also returns the offset of the first run later than edge
-- (#log + 1 if none) and the units from there on: for a step, the runs
-- still in the window.
local function logok(log, edge)
	local len, prev, p, from, total = #log, -1, 2, 2, 0
	while p < len do
		local m, f = chunk(len, p)
		local c = { sunpack(f, log, p) }
		for q = 1, m / 8, 2 do
			local at, u = c[q], c[q + 1]
			if not (at > prev and at % 1 == 0 and u >= 1 and u < BOUND and u % 1 == 0) then
				return false
			end
			if at > edge then
				total = total + u
			else
				from = p + 8 * (q + 1)
			end
			prev = at
		end
		p = p + m
	end
	return prev < BOUND, from, total
end

local nkeys = #KEYS
local out
if nkeys == 1 then
	out = { 0, 0, 0, 0, 0 } -- sized at once, not grown
else
	out = {}
end
local first = 1
-- Request i's five integers start at out[5i − shift]: a group to commit
-- puts its receipts after them, and shifts the groups after it.
local shift = 4
while first <= nkeys do
	local last = first
	while ARGV[8 * last + 1] == '0' do
		last = last + 1
	end
	local m = ARGV[8 * last + 1]
	local check, commit, tail = m == '2', false, 0
	if m ~= '1' and not check then
		if m == '4' then
			-- Request i's receipt at out[tail + 2i], after the group's
			-- decisions.
			commit, tail = true, 5 * last - shift + 5 - 2 * first
			for j = tail + 2 * first, tail + 2 * last + 1 do
				out[j] = 0
			end
		elseif m == '3' then
			-- The refund (see Commits and refunds), key by key: a key named
			-- twice is read again after its first refund. v is the state
			-- to write, fresh in ms µs; false deletes the key; nil leaves it.
			local rc = 8 * nkeys
			for i = first, last do
				local a = 8 * i - 6
				local key, alg, cost = KEYS[i], ARGV[a] + 0, ARGV[a + 5] + 0
				local raw = read(key)
				local v, ms
				if cost > 0 and type(raw) == 'string' and byte(raw) == alg then
					local n, t = ARGV[a + 1] + 0, ARGV[a + 2] + 0
					local r1, r2 = ARGV[rc + 2 * i] + 0, ARGV[rc + 2 * i + 1] + 0
					if alg == 5 then
						-- A log the step would read as fresh (see State)
						-- gets nothing; nor does one without the run.
						local ok, off, units
						if #raw % 16 == 1 then
							-- off: the first run at r1 or later.
							ok, off = logok(raw, r1 - 1)
						end
						if ok and off < #raw then
							local at
							at, units = sunpack('>dd', raw, off)
							ok = at == r1
						end
						if ok and units then
							local rest
							if units > cost then
								rest = ssub(raw, 1, off + 7) .. pack('>d', units - cost) .. ssub(raw, off + 16)
							else
								rest = ssub(raw, 1, off - 1) .. ssub(raw, off + 16)
							end
							v = false
							if #rest > 1 then
								ms = sunpack('>d', rest, #rest - 15) + t - now
								if ms > 0 then
									v = rest
								end
							end
						end
					elseif #raw == 25 then
						local sa, sb, sc = sunpack('>ddd', raw, 2)
						if not state3(sa, sb, sc) then
							-- A state the step would read as fresh (see State)
							-- gets nothing.
						elseif alg == 0 or alg == 2 then
							-- The TAT (tus, trem) as rate's tatOf reads it; k =
							-- (Tc − C) in ticks, d = (T − C) in ticks. At the
							-- commit's C, d is the debt, and the request's units
							-- are what is left of it; past it, a d below k tells
							-- a key reset since. Products past 2^53 round, but
							-- monotonically: each comparison with an exact
							-- integer keeps its sense, and a d below the give,
							-- itself below 2^53, is exact.
							local tus, trem = sa, sb
							if sb >= n or sb < 0 then
								tus, trem = sa + 1, 0
							end
							local k = r2 - (sc - r1) * n
							local d = (tus - sc) * n + trem
							if sc >= r1 and k > 0 and d >= 0 and (sc == r1 or d >= k) then
								local give = cost * t
								if k < give then
									give = k
								end
								if d < give then
									give = d
								end
								local q = give / n
								q = q - q % 1
								tus, trem = tus - q, trem - (give - q * n)
								if trem < 0 then
									tus, trem = tus - 1, trem + n
								end
								local at = now
								if sc > at then
									at = sc
								end
								v = false
								if tus > at or (tus == at and trem > 0) then
									v = pack('>Bddd', alg, tus, trem, sc)
									ms = tus - now
									if trem > 0 then
										ms = ms + 1
									end
								end
							end
						elseif alg == 1 then
							-- (debt, last refill); k = (Tc − C) in ticks, and
							-- the debt as gcra's d.
							local k = r2 - (sb - r1) * n
							if sb >= r1 and k > 0 and (sb == r1 or sa >= k) then
								local give = cost * t
								if k < give then
									give = k
								end
								if sa < give then
									give = sa
								end
								local debt = sa - give
								local c = debt / n -- fresh ⌈debt/n⌉ after the last refill
								local f = c - c % 1
								if f < c then
									f = f + 1
								end
								ms = sb + f - now
								v = false
								if debt > 0 and ms > 0 then
									v = pack('>Bddd', 1, debt, sb, 0)
								end
							end
						elseif alg == 3 then
							if sa == r1 and sb > 0 then
								ms = r2 - now
								v = false
								if sb > cost and ms > 0 then
									v = pack('>Bddd', 3, sa, sb - cost, 0)
								end
							end
						elseif alg == 4 then
							local cur, prev = sb, sc
							if sa == r1 then
								cur = cur - cost
								if cur < 0 then
									cur = 0
								end
							elseif sa == r1 + t then
								prev = prev - cost
								if prev < 0 then
									prev = 0
								end
							end
							if cur ~= sb or prev ~= sc then
								ms = 0 -- rate's slidingReset, differences first as the step's reset
								if cur > 0 then
									ms = sa - now + 2 * t
								elseif prev > 0 then
									ms = sa - now + t
								end
								v = false
								if ms > 0 then
									v = pack('>Bddd', 4, sa, cur, prev)
								end
							end
						end
					end
				end
				if v then
					if expire then
						local c = ms / 1000 -- as the write below
						local f = c - c % 1
						if f < c then
							f = f + 1
						end
						redis.call('SET', key, v, 'PX', f + 1)
					else
						redis.call('SET', key, v)
					end
				elseif v == false then
					redis.call('DEL', key)
				end
			end
			check = true
		else
			return redis.error_reply('sluice: unknown group mark ' .. tostring(m))
		end
	end
	local group = last > first
	-- A group of several requests keeps each key's state before the group
	-- and as its earlier steps left it (a key named twice sees the state
	-- the earlier step left), and every step's new state. A group of one
	-- keeps them in locals.
	local before, pending, news
	if group then
		before, pending, news = {}, {}, {}
	end
	local s1a, s1b, s1c, s1log, loaded = 0, 0, 0, nil, false
	local fresh, na, nb, nc, nlog, reset, nalg
	local ok = true
	local peek = false
	for pass = 1, 2 do
		for i = first, last do
			local o = 5 * i - shift
			if not peek or out[o] == 1 then
				local a = 8 * i - 6
				local key, alg = KEYS[i], ARGV[a] + 0
				local cost = 0
				if not peek then
					cost = ARGV[a + 5] + 0
				end

				-- The state this step starts from.
				local sa, sb, sc, slog
				local st
				if group then
					st = before[key]
					if not peek and pending[key] then
						st = pending[key]
					end
				end
				if st then
					sa, sb, sc, slog = st[1], st[2], st[3], st[4]
				elseif loaded then
					sa, sb, sc, slog = s1a, s1b, s1c, s1log
				else
					sa, sb, sc = 0, 0, 0
					local raw = read(key)
					-- Numbers the script never writes read as fresh too.
					if type(raw) == 'string' and byte(raw) == alg then
						if alg == 5 then
							-- A log stays packed, as stored, with the runs in
							-- the window of this step's period (see Logs).
							if #raw % 16 == 1 then
								local w = ARGV[a + 2] + 0
								local ok, from, total = logok(raw, now - w)
								if ok then
									slog = { raw, w, from, total }
								end
							end
						elseif #raw == 25 then
							local a, b, c = sunpack('>ddd', raw, 2)
							if state3(a, b, c) then
								sa, sb, sc = a, b, c
							end
						end
					end
					if group then
						before[key] = { sa, sb, sc, slog }
					else
						s1a, s1b, s1c, s1log, loaded = sa, sb, sc, slog, true
					end
				end

				-- The step: allowed, remaining, reset, retry and delay, and
				-- the new state (fresh, or na, nb, nc, or nlog).
				local n, t, b = ARGV[a + 1] + 0, ARGV[a + 2] + 0, ARGV[a + 3] + 0
				if b <= 0 then
					b = n
				end
				local allowed, remaining, retry, delay = false, 0, 0, 0
				fresh, na, nb, nc, nlog, nalg = false, 0, 0, 0, nil, alg

				if alg == 0 or alg == 2 then
					-- gcra and leaky_bucket (rate's gcra). Instants are pairs
					-- (µs, rem) meaning µs + rem/n, with 0 ≤ rem < n.
					local at = now -- max(now, latest seen)
					if sc > at then
						at = sc
					end
					-- A gcra limit with a larger count, since changed, may
					-- have left a fraction of n or more: round the TAT up
					-- to the next µs (rate's tatOf).
					local tus, trem = sa, sb
					if sb >= n or sb < 0 then
						tus, trem = sa + 1, 0
					end
					-- base = max(tat, at); debt = base − at in ticks. A debt
					-- beyond 2^53 rounds, but stays beyond b·t: it refuses.
					local bus, brem, debt = at, 0, 0
					if at < tus or (at == tus and trem > 0) then
						bus, brem = tus, trem
						debt = (tus - at) * n + trem
					end
					local ticks = cost * t -- next = base + cost·t ticks = (bus + q, nrem)
					local q = ticks / n
					q = q - q % 1
					local nrem = brem + ticks - q * n
					if nrem >= n then
						q, nrem = q + 1, nrem - n
					end
					local nus = bus + q
					allowed = debt + ticks <= b * t
					local maxdelay = -1 -- a leaky_bucket's; -1: no bound
					-- A gcra caller who waits (rate's gcraQueue): its wait,
					-- cut so that the debt stays within 2^52 (queueWait),
					-- or -1; and extra, the ticks past b·t it may reserve.
					local queue, extra = -1, 0
					if alg == 0 and not allowed then
						local md = ARGV[a + 6] + 0
						if md >= 0 then
							local most = (MAXEXACT - b * t) / n
							queue = most - most % 1
							if md < queue then
								queue = md
							end
							if queue > at - now then
								extra = (queue - (at - now)) * n
							end
							if not allowed and debt + ticks <= b * t + extra then
								-- Admitted once its units refill: ⌈(debt +
								-- cost·t − b·t)/n⌉ after at.
								allowed = true
								local c = (debt + ticks - b * t) / n
								delay = c - c % 1
								if delay < c then
									delay = delay + 1
								end
								delay = delay + at - now
							end
						end
					end
					if alg == 2 then
						maxdelay = ARGV[a + 6] + 0
						delay = bus - now -- ⌈base − now⌉
						if brem > 0 then
							delay = delay + 1
						end
						if maxdelay >= 0 and delay > maxdelay then
							allowed = false
							retry = delay - maxdelay
						end
					end
					-- Reset ends at (eus, erem): next if allowed, else the
					-- stored tat.
					local eus, erem = nus, nrem
					if allowed then
						-- Of the b units, the request takes cost and debt
						-- holds ⌈debt/t⌉.
						remaining = b - cost
						if debt > 0 then
							local c = debt / t
							local f = c - c % 1
							if f < c then
								f = f + 1
							end
							remaining = remaining - f
						end
						if debt + ticks == 0 then
							fresh = true -- the bucket is full
						else
							na, nb, nc = nus, nrem, at
						end
					else
						ticks = b * t -- full = at + b·t ticks = (fus, frem)
						local fq = ticks / n
						fq = fq - fq % 1
						local fus, frem = at + fq, ticks - fq * n
						-- A request beyond the capacity (full < next) waits
						-- ⌈next − full⌉ + at − now; one within it only for
						-- its turn (a clock behind the latest time seen
						-- gains no room by catching up). A refused next can
						-- lie beyond 2^53 µs (a bucket that takes a century
						-- to refill, now full), where nus is not exact: take
						-- the differences first.
						local over = (bus - at) + (q - fq)
						if over > 0 or (over == 0 and nrem > frem) then
							local r = bus - now + (q - fq)
							if nrem > frem then
								r = r + 1
							end
							if queue >= 0 then
								r = r - queue -- then it would be reserved
							end
							if r > retry then
								retry = r
							end
						end
						delay = 0
						-- Remaining counts from base up to full.
						if bus < fus or (bus == fus and brem < frem) then
							remaining = ((fus - bus) * n + frem - brem) / t
							remaining = remaining - remaining % 1
						end
						eus, erem = tus, trem
					end
					if maxdelay >= 0 and remaining > 0 then
						-- A caller who waits at most maxdelay is told only the
						-- places whose turn comes within it (rate's turnsBy):
						-- turns at e, e + I, e + 2I, ... from the next one.
						local eu, er = bus, brem
						if allowed then
							eu, er = nus, nrem
						end
						local d = now + maxdelay - eu
						if d < 0 then
							remaining = 0
						else
							local most = remaining * t / n -- ⌊remaining·I⌋ µs
							most = most - most % 1
							if d <= most + 1 then -- else every turn is in time
								local k = d * n - er
								if k < 0 then
									remaining = 0
								else
									k = k / t
									k = k - k % 1 + 1
									if k < remaining then
										remaining = k
									end
								end
							end
						end
					end
					reset = eus - now -- ⌈end − now⌉, at least 0
					if erem > 0 then
						reset = reset + 1
					end
					if reset < 0 then
						reset = 0
					end
				elseif alg == 1 then
					-- token_bucket: (debt in ticks, last refill).
					local capacity = b * t
					local debt, lastref = sa, sb
					local shift = lastref - now -- a clock stepped back: no refill
					if shift < 0 then
						shift = 0
					end
					local e = now - lastref
					if e > 0 then
						local c = debt / n -- ⌈debt/n⌉
						local f = c - c % 1
						if f < c then
							f = f + 1
						end
						if e >= f then
							debt = 0
						else
							debt = debt - e * n
						end
						lastref = now
					end
					local level, need = capacity - debt, cost * t
					-- A caller who waits may reserve extra ticks past the
					-- capacity (rate's queueTicks), its wait cut so that
					-- the debt stays within 2^52.
					local queue, extra = 0, 0
					local wait = 0 -- ⌈(need − level)/n⌉ + shift, when short
					if level < need then
						local md = ARGV[a + 6] + 0
						if md >= 0 then
							local most = (MAXEXACT - capacity) / n
							queue = most - most % 1
							if md < queue then
								queue = md
							end
							if queue > shift then
								extra = (queue - shift) * n
							end
						end
						local c = (need - level) / n
						wait = c - c % 1
						if wait < c then
							wait = wait + 1
						end
						wait = wait + shift
					end
					if need - level > extra then
						remaining = level / t
						remaining = remaining - remaining % 1
						retry = wait - queue
					else
						allowed = true
						delay = wait
						debt = debt + need
						remaining = (capacity - debt) / t
						remaining = remaining - remaining % 1
						if debt == 0 then
							fresh = true
						else
							na, nb = debt, lastref
						end
					end
					local c = debt / n
					reset = c - c % 1
					if reset < c then
						reset = reset + 1
					end
					reset = reset + shift
				elseif alg == 3 then
					-- fixed_window: (window start, count).
					local cal = ARGV[a + 4] + 0
					local start, stop
					if cal == 1 then
						-- UTC calendar months. month(x) returns the start and
						-- end of the month holding x (H. Hinnant's
						-- civil_from_days and days_from_civil); it is made
						-- here, for monthly limits alone.
						local DAY = 86400000000
						local function month(x)
							local z = floor(x / DAY) + 719468
							local era = floor(z / 146097)
							local doe = z - era * 146097
							local yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524) - floor(doe / 146096)) / 365)
							local y = yoe + era * 400
							local doy = doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100))
							local mp = floor((5 * doy + 2) / 153)
							local m = mp < 10 and mp + 3 or mp - 9
							if m <= 2 then
								y = y + 1
							end
							local bounds = {}
							for k = 1, 2 do
								local yy, mm = y, m
								if k == 2 then
									mm = m + 1
									if mm > 12 then
										yy, mm = y + 1, 1
									end
								end
								if mm <= 2 then
									yy = yy - 1
								end
								local era2 = floor(yy / 400)
								local yoe2 = yy - era2 * 400
								local mp2 = mm > 2 and mm - 3 or mm + 9
								local doy2 = floor((153 * mp2 + 2) / 5)
								local doe2 = yoe2 * 365 + floor(yoe2 / 4) - floor(yoe2 / 100) + doy2
								bounds[k] = (era2 * 146097 + doe2 - 719468) * DAY
							end
							return bounds[1], bounds[2]
						end
						start, stop = month(now)
						if sa > start and sb > 0 then
							local _
							_, stop = month(sa)
						end
					else
						start = now / t
						start = (start - start % 1) * t
						stop = start + t
						if sa > start and sb > 0 then
							-- The end of the window holding sa, which a
							-- limit with another period may have left
							-- anywhere in it (rate's window(start)).
							stop = sa / t
							stop = (stop - stop % 1) * t + t
						end
					end
					local count = 0
					if sa == start then
						count = sb
					elseif sa > start and sb > 0 then
						-- Time went back: the stored (later) window still counts.
						start, count = sa, sb
					end
					if count + cost > n then
						remaining = n - count
						retry = stop - now
						reset = retry
					else
						allowed = true
						count = count + cost
						remaining = n - count
						if count == 0 then
							fresh = true
							reset = 0
						else
							reset = stop - now
							na, nb = start, count
						end
					end
				elseif alg == 4 then
					-- sliding_window: (current window start, cur, prev). A
					-- refusal's arithmetic, less common, keeps floor and max.
					local start = now / t
					start = (start - start % 1) * t
					local cur, prev = 0, 0
					if sa == start then
						cur, prev = sb, sc
					elseif sa == start - t then
						prev = sb
					elseif sa > start then
						start, cur, prev = sa, sb, sc
					end
					-- A count above this limit's, left by another limit, is
					-- a full window (rate's clamp): products stay exact.
					-- The state's own counts are written back.
					local kcur, kprev = cur, prev
					if cur > n then
						cur = n
					end
					if prev > n then
						prev = n
					end
					local e = now - start
					if e < 0 then
						e = 0
					end
					local weighted = prev * e / t -- ⌈prev·(t−e)/t⌉ = prev − ⌊prev·e/t⌋
					weighted = prev - (weighted - weighted % 1)
					if cur + cost + weighted > n then
						remaining = max(0, n - cur - weighted)
						-- rate's slidingRetry: in this window, or the next.
						retry = -1
						local room = n - cur - cost
						if room >= 0 and prev > 0 then
							local e2 = -floor(-(prev - room) * t / prev)
							if e2 < t then
								retry = max(0, start + e2 - now)
							end
						end
						if retry < 0 then
							local k = cur - (n - cost)
							retry = start + t - now
							if k > 0 and cur > 0 then
								retry = retry - floor(-k * t / cur)
							end
						end
					else
						allowed = true
						cur = cur + cost
						remaining = n - cur - weighted
						if cur == 0 and prev == 0 then
							fresh = true
						else
							na, nb, nc = start, kcur + cost, kprev
						end
					end
					-- The difference first: start + 2·t may pass 2^53 (a
					-- period near 2^52µs), where the sum would round, while
					-- the reset itself stays below it (see Numbers).
					if cur > 0 then
						reset = start - now + 2 * t
					elseif prev > 0 then
						reset = start - now + t
					else
						reset = 0
					end
				elseif alg == 5 then
					-- sliding_log: slog (see Logs) holds runs (t1, n1), (t2,
					-- n2), ...: n1 units admitted at t1 and so on, t1 < t2 <
					-- ...; rate's Log holds the same times one per unit.
					-- from is the offset of the first run still in the
					-- window (len + 1 if none), total the units from there
					-- on: as the log's load or step found them for this
					-- period, else counted here. A chunk whose last run has
					-- left the window has all left: one number is read of
					-- it.
					local log, len, from, total, p = '', 1, 2, 0, 2
					if slog then
						log = slog[1]
						len = #log
						if slog[2] == t then
							from, total, p = slog[3], slog[4], len
						else
							from = len + 1
						end
					end
					while p < len do
						local m, f = chunk(len, p)
						if from <= len or now - sunpack('>d', log, p + m - 16) < t then
							local c = { sunpack(f, log, p) }
							local q = 1
							if from > len then
								while now - c[q] >= t do
									q = q + 2
								end
								from = p + 8 * (q - 1)
							end
							for j = q + 1, m / 8, 2 do
								total = total + c[j]
							end
						end
						p = p + m
					end
					if total + cost > n then
						-- The run that holds the kth unit from the window's
						-- start: k units must leave first.
						local k = total + cost - n
						local at, seen = 0, 0
						p = from
						while p < len do
							local m, f = chunk(len, p)
							local c = { sunpack(f, log, p) }
							for q = 1, m / 8, 2 do
								seen = seen + c[q + 1]
								if seen >= k then
									at = c[q]
									break
								end
							end
							if seen >= k then
								break
							end
							p = p + m
						end
						remaining = max(0, n - total)
						reset = sunpack('>d', log, len - 15) + t - now
						retry = at + t - now
					else
						allowed = true
						remaining = n - total - cost
						if total == 0 and cost == 0 then
							fresh = true
							reset = 0
						else
							-- The runs in the window, as they are stored, and
							-- the new units: in the last run if it is at now
							-- or later (time went back: they are logged at
							-- the latest time), else in a run of their own.
							-- Every run of the new log is in the window.
							local last, nl = now, nil
							if from > len then
								nl = pack('>Bdd', 5, now, cost)
							else
								local la, lu = sunpack('>dd', log, len - 15)
								last = la
								if from == 2 then
									-- The whole log: one copy, not two.
									if cost == 0 then
										nl = log
									elseif la >= now then
										nl = ssub(log, 1, len - 8) .. pack('>d', lu + cost)
									else
										nl = log .. pack('>dd', now, cost)
										last = now
									end
								elseif cost == 0 then
									nl = '\5' .. ssub(log, from)
								elseif la >= now then
									nl = '\5' .. ssub(log, from, len - 8) .. pack('>d', lu + cost)
								else
									nl = '\5' .. ssub(log, from) .. pack('>dd', now, cost)
									last = now
								end
							end
							nlog = { nl, t, 2, total + cost }
							reset = last + t - now
						end
					end
				else
					return redis.error_reply('sluice: unknown algorithm ' .. tostring(ARGV[a]))
				end

				-- A state left by a limit with a larger count may hold more
				-- than this one allows: nothing remains, never less.
				if remaining < 0 then
					remaining = 0
				end
				-- A look (cost 0) is never refused: it consumes nothing,
				-- whatever the state and however long a leaky_bucket's
				-- queue, and keeps the state as it is.
				if cost == 0 and not allowed then
					allowed, retry = true, 0
					fresh, na, nb, nc, nlog = false, sa, sb, sc, slog
				end
				if peek then
					out[o + 1], out[o + 2] = remaining, reset
				else
					out[o], out[o + 1], out[o + 2], out[o + 3], out[o + 4] = allowed and 1 or 0, remaining, reset, retry, delay
					if not allowed then
						ok = false
					elseif group then
						if fresh then
							pending[key] = { 0, 0, 0, nil }
						else
							pending[key] = { na, nb, nc, nlog }
						end
					end
					if group then
						news[i] = { fresh, na, nb, nc, nlog, reset, alg }
					end
				end
			end
		end
		if ok and not check then
			break
		end
		-- Refused, or only checked: nothing is written, and a request that
		-- would have passed alone reports what is left without it.
		peek = true
	end

	if ok and not check then
		for i = first, last do
			local key = KEYS[i]
			local wfresh, wa, wb, wc, wlog, wreset, alg = fresh, na, nb, nc, nlog, reset, nalg
			if group then
				local w = news[i]
				wfresh, wa, wb, wc, wlog, wreset, alg = w[1], w[2], w[3], w[4], w[5], w[6], w[7]
			end
			if wfresh then
				redis.call('DEL', key)
			else
				local v
				if alg == 5 then
					v = wlog[1]
				else
					v = pack('>Bddd', alg, wa, wb, wc)
				end
				if commit then
					local r = tail + 2 * i
					if alg == 5 then
						out[r] = sunpack('>d', wlog[1], #wlog[1] - 15)
					elseif alg == 0 or alg == 2 then
						out[r], out[r + 1] = wc, (wa - wc) * (ARGV[8 * i - 5] + 0) + wb
					elseif alg == 1 then
						out[r], out[r + 1] = wb, wa
					elseif alg == 3 then
						out[r], out[r + 1] = wa, now + wreset
					else
						out[r] = wa
					end
				end
				if expire then
					-- ⌈reset in ms⌉ + 1: from Redis 7.2 on, PX may count from
					-- the time the script started, which may come a little
					-- before now (TIME, read since): the millisecond keeps
					-- the key until its state is fresh.
					local ms = wreset / 1000
					local c = ms - ms % 1
					if c < ms then
						c = c + 1
					end
					redis.call('SET', key, v, 'PX', c + 1)
				else
					redis.call('SET', key, v)
				end
			end
		end
	end
	if commit then
		shift = shift - 2 * (last - first + 1)
	end
	first = last + 1
end
return out
