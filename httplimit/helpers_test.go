package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// start is aligned to every window the tests use (10 s, a minute, a day).
var start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// env is a middleware under test on a fake clock and a real memory store.
type env struct {
	t        *testing.T
	clock    *ratetest.Clock
	store    *switchStore
	observer *recorder
	h        http.Handler
}

// newEnv loads a policy file and wraps a handler that answers 200 "ok"
// (or next, when given).
func newEnv(t *testing.T, config string, o Options, next http.Handler) *env {
	t.Helper()
	set, err := policy.Load("test.yaml", []byte(config))
	if err != nil {
		t.Fatal(err)
	}
	clock := ratetest.NewClock(start)
	store := &switchStore{Store: memory.New(memory.Options{Clock: clock})}
	obs := &recorder{}
	o.Clock, o.Observer = clock, obs
	if next == nil {
		next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })
	}
	return &env{t: t, clock: clock, store: store, observer: obs, h: Middleware(set, store, o)(next)}
}

// req describes one request.
type req struct {
	method, path string
	remote       string
	header       map[string]string
	user         string
	plan         string // put in the request's context with WithPlan
	body         string
}

func (e *env) do(r req) *httptest.ResponseRecorder {
	e.t.Helper()
	if r.method == "" {
		r.method = "GET"
	}
	if r.path == "" {
		r.path = "/"
	}
	hr := httptest.NewRequest(r.method, r.path, nil)
	if r.body != "" {
		hr = httptest.NewRequest(r.method, r.path, strings.NewReader(r.body))
		hr.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if r.remote != "" {
		hr.RemoteAddr = r.remote
	}
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	if r.user != "" {
		hr = hr.WithContext(WithUser(hr.Context(), r.user))
	}
	if r.plan != "" {
		hr = hr.WithContext(WithPlan(hr.Context(), r.plan))
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, hr)
	return w
}

// expect checks a response: its status, the headers listed (an empty
// value means absent) and, if body is not nil, its JSON body.
func expect(t *testing.T, step string, w *httptest.ResponseRecorder, status int, headers map[string]string, body map[string]any) {
	t.Helper()
	if w.Code != status {
		t.Errorf("%s: status %d, want %d (body %s)", step, w.Code, status, w.Body)
	}
	for k, want := range headers {
		got, present := w.Header()[http.CanonicalHeaderKey(k)]
		switch {
		case want == "" && present:
			t.Errorf("%s: %s = %q, want absent", step, k, got)
		case want != "" && (len(got) != 1 || got[0] != want):
			t.Errorf("%s: %s = %q, want %q", step, k, got, want)
		}
	}
	if body != nil {
		if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%s: Content-Type %q, want application/problem+json", step, ct)
		}
		var got map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
			t.Fatalf("%s: body %q: %v", step, w.Body, err)
		}
		if !reflect.DeepEqual(got, body) {
			t.Errorf("%s: body\n got %v\nwant %v", step, got, body)
		}
	}
}

// switchStore is a real store that can be switched off, as a Redis that
// goes away would be.
type switchStore struct {
	sluice.Store
	down atomic.Bool
	// err is what the store fails with while down: errDown if nil.
	err error
}

var errDown = errors.New("store unreachable")

func (s *switchStore) failure() error {
	if s.err != nil {
		return s.err
	}
	return errDown
}

func (s *switchStore) Decide(ctx context.Context, r rate.Request) (rate.Decision, error) {
	if s.down.Load() {
		return rate.Decision{}, s.failure()
	}
	return s.Store.Decide(ctx, r)
}

func (s *switchStore) DecideAll(ctx context.Context, rs []rate.Request, out []rate.Decision) (rate.Decision, error) {
	if s.down.Load() {
		return rate.Decision{}, s.failure()
	}
	return s.Store.DecideAll(ctx, rs, out)
}

// recorder is an Observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []policy.Event
	shed   []policy.Priority
}

func (r *recorder) Observe(_ context.Context, e policy.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) Shed(_ context.Context, p policy.Priority) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shed = append(r.shed, p)
}

// count returns how many events of policy name were refusals, shadow or
// not, and store errors.
func (r *recorder) count(name string) (allowed, refused, storeErrs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.Policy.Name != name {
			continue
		}
		if e.Decision.Allowed {
			allowed++
		} else {
			refused++
		}
		if e.StoreErr != nil {
			storeErrs++
		}
	}
	return
}

func contextWithCancel(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithCancel(r.Context())
}
