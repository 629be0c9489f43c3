package httplimit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// TestPolicyStatesServedRate: RateLimit-Policy's q per w seconds is the
// rate the middlewares serve, whatever the burst: a client that spends
// its burst and then takes all it can, 1ms apart on the fake clock, is
// served in 4s just what q/w says.
func TestPolicyStatesServedRate(t *testing.T) {
	const span = 4 * time.Second
	for _, limit := range []string{"100/s burst 10", "1000/s burst 1", "3 per 2s burst 5", "20/s burst 40", "1/s burst 2", "fixed_window 10 per 500ms"} {
		middleware := newEnv(t, fmt.Sprintf("policies:\n  - {name: api, limits: [%q]}\n", limit), Options{}, nil)
		keyed := newKeyedEnv(t, "api", ByClientIP(nil), LimitOptions{}, limit)
		for _, c := range []struct {
			via   string
			clock *ratetest.Clock
			do    func() *httptest.ResponseRecorder
		}{
			{"Middleware", middleware.clock, func() *httptest.ResponseRecorder { return middleware.do(req{}) }},
			{"Limit", keyed.clock, func() *httptest.ResponseRecorder { return keyed.do("192.0.2.1:1") }},
		} {
			w := c.do()
			q, per, ok := policyRate(w.Header().Get("RateLimit-Policy"))
			if !ok {
				t.Fatalf("%s %s: RateLimit-Policy %q, want `\"api\";q=Q;w=W`", c.via, limit, w.Header().Get("RateLimit-Policy"))
			}
			for c.do().Code != http.StatusTooManyRequests {
				// Spend the burst: what follows is the rate alone.
			}
			served := 0
			for end := c.clock.Now().Add(span); c.clock.Now().Before(end); {
				c.clock.Advance(time.Millisecond)
				for c.do().Code != http.StatusTooManyRequests {
					served++
				}
			}
			stated := q * int64(span) / int64(per)
			if stated != int64(served) {
				t.Errorf("%s %s: RateLimit-Policy %s states %d in %v, served %d", c.via, limit, w.Header().Get("RateLimit-Policy"), stated, span, served)
			}
		}
	}
}

// policyRate reads q and w, as a duration, from the RateLimit-Policy item
// of limit api.
func policyRate(item string) (q int64, w time.Duration, ok bool) {
	rest, ok := strings.CutPrefix(item, `"api";q=`)
	if !ok {
		return 0, 0, false
	}
	qs, ws, ok := strings.Cut(rest, ";w=")
	if !ok {
		return 0, 0, false
	}
	q, err1 := strconv.ParseInt(qs, 10, 64)
	s, err2 := strconv.ParseInt(ws, 10, 64)
	return q, time.Duration(s) * time.Second, err1 == nil && err2 == nil && q > 0 && s > 0
}

// TestLimitNamesAgree: a refusal's headers and its problem body name the
// limit the same way, whatever name sluice.NewLimiter accepts: the
// headers' Structured Field string reads as the body's JSON string.
func TestLimitNamesAgree(t *testing.T) {
	for _, name := range []string{"api", `we"ird\`, "a b", "a:b{c}%", "é", "caf\u00e9", "\t", "a\x7f", "\xff"} {
		clock := ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
		l, err := sluice.NewLimiter(sluice.LimiterOptions{Name: name, Limits: []rate.Limit{rate.MustParseLimit("1/m")},
			Store: memory.New(memory.Options{Clock: clock}), Clock: clock})
		if err != nil {
			continue // refused: never named anywhere
		}
		h := Limit(l, ByClientIP(nil), LimitOptions{})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		var w *httptest.ResponseRecorder
		for range 2 {
			w = httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		}
		var body struct {
			Violated []string `json:"violated-policies"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || len(body.Violated) != 1 {
			t.Fatalf("name %q: status %d, body %s (%v): want one violated policy", name, w.Code, w.Body, err)
		}
		for _, field := range []string{"RateLimit", "RateLimit-Policy"} {
			v := w.Header().Get(field)
			if got, ok := sfString(v); !ok || got != body.Violated[0] {
				t.Errorf("name %q: %s %s names %q (parsed: %v), the body %q", name, field, v, got, ok, body.Violated[0])
			}
		}
	}
}

// sfString reads the Structured Field string (RFC 9651) that item starts
// with, and whether it is one: printable ASCII, '"' and '\' escaped.
func sfString(item string) (string, bool) {
	if !strings.HasPrefix(item, `"`) {
		return "", false
	}
	var b strings.Builder
	for i := 1; i < len(item); i++ {
		switch c := item[i]; {
		case c == '"':
			return b.String(), true
		case c == '\\':
			if i++; i == len(item) || item[i] != '"' && item[i] != '\\' {
				return "", false
			}
			b.WriteByte(item[i])
		case c < 0x20 || c > 0x7e:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return "", false
}
