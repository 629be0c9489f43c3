package policy

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/store/memory"
)

// A flood of low-priority requests, each shed at once, must not shed a
// critical request while a slot within its share is free: a low request
// being turned away holds no slot, even for an instant.
func TestGateLowFloodSpareSlot(t *testing.T) {
	g := newGate(Concurrency{MaxInFlight: 100, Shares: [numPriorities]int{50, 80, 100}}, nil)
	for range 99 {
		if !g.acquire(Critical) {
			t.Fatal("could not fill 99 of 100 slots")
		}
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				if g.acquire(Low) {
					t.Error("a low request admitted past its share of 50")
					g.release()
				}
			}
		})
	}
	shed := 0
	for range 20000 {
		if !g.acquire(Critical) {
			shed++
			continue
		}
		g.release()
	}
	stop.Store(true)
	wg.Wait()
	if shed > 0 {
		t.Errorf("%d of 20000 critical requests shed with 99 of 100 slots taken", shed)
	}
}

type panickingObserver struct{}

func (panickingObserver) Observe(context.Context, Event) { panic("observer bug") }
func (panickingObserver) Shed(context.Context, Priority) {}

// A panic while a request is decided (here in the Observer, code of the
// application's) reaches the transport before it has an Outcome to call
// Done on: the slot the request took must be given back, or every such
// panic would shrink the concurrency limit for good.
func TestEnforcePanicReleasesSlot(t *testing.T) {
	set, err := Load("t.yaml", []byte(`
concurrency:
  max_in_flight: 1
policies:
  - {name: a, limits: ["10/s"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	var inFlight InFlight
	e := NewEnforcer(set, memory.New(memory.Options{}), Options{Observer: panickingObserver{}, InFlight: &inFlight})
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("Enforce did not panic")
			}
		}()
		r := httptest.NewRequest("GET", "/", nil)
		out := e.Enforce(context.Background(), &Request{HTTP: r, Header: r.Header})
		out.Done()
	}()
	if n := inFlight.N(); n != 0 {
		t.Errorf("after a panic in Enforce, %d requests in flight, want 0", n)
	}
}

// A reload that adds a concurrency limit counts the requests still in
// flight on the generation before it, which set none: sharing an
// InFlight, that generation counted them too. Otherwise the new limit of
// 2 would admit 2 more beside the 2 slow requests still running.
func TestInFlightAcrossReloadThatAddsLimit(t *testing.T) {
	var inFlight InFlight
	gen := func(config string) *Enforcer {
		set, err := Load("t.yaml", []byte(config))
		if err != nil {
			t.Fatal(err)
		}
		return NewEnforcer(set, memory.New(memory.Options{}), Options{InFlight: &inFlight})
	}
	old := gen("policies: [{name: api, limits: [\"100/s\"]}]\n")
	next := gen("concurrency: {max_in_flight: 2}\npolicies: [{name: api, limits: [\"100/s\"]}]\n")
	enforce := func(e *Enforcer) Outcome {
		r := httptest.NewRequest("GET", "/", nil)
		return e.Enforce(context.Background(), &Request{HTTP: r, Header: r.Header})
	}
	slow := []Outcome{enforce(old), enforce(old)}
	if o := enforce(next); o.Verdict != Shed {
		t.Errorf("with 2 requests in flight from before the reload, max_in_flight: 2 gave %v, want shed", o.Verdict)
		o.Done()
	}
	for i := range slow {
		slow[i].Done()
	}
	o := enforce(next)
	defer o.Done()
	if o.Verdict != Allow || inFlight.N() != 1 {
		t.Errorf("once they finished: %v with %d in flight, want allow with 1", o.Verdict, inFlight.N())
	}
}

// countingBody counts the bytes read of a request body.
type countingBody struct {
	r *strings.Reader
	n atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n.Add(int64(n))
	return n, err
}

func (b *countingBody) Close() error { return nil }

// The concurrency limit counts a request before its keys are built: a
// form:NAME key reads the body, and a request shed for want of a slot has
// none of it read, so that the limit bounds how many bodies are held at
// once.
func TestShedBeforeFormIsRead(t *testing.T) {
	set, err := Load("t.yaml", []byte(`
concurrency:
  max_in_flight: 1
policies:
  - {name: login, match: "POST /login", key: "form:username", limits: ["10/s"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	e := NewEnforcer(set, memory.New(memory.Options{}), Options{})
	send := func() (Outcome, *countingBody) {
		body := &countingBody{r: strings.NewReader("username=alice&password=guess")}
		r := httptest.NewRequest("POST", "/login", nil)
		r.Body = body
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return e.Enforce(context.Background(), &Request{HTTP: r, Header: r.Header}), body
	}
	first, firstBody := send()
	if first.Verdict != Allow || firstBody.n.Load() == 0 {
		t.Fatalf("the first request: %v with %d bytes read, want allowed with its form read", first.Verdict, firstBody.n.Load())
	}
	second, secondBody := send() // the first still holds the only slot
	if second.Verdict != Shed || secondBody.n.Load() != 0 {
		t.Errorf("the second request: %v with %d bytes of its body read, want shed with none", second.Verdict, secondBody.n.Load())
	}
	second.Done()
	first.Done()
}
