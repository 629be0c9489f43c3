package policy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/store/memory"
)

// costPolicies returns a policy file of n policies, each on a route of
// its own, the first of which the benchmark's requests match.
func costPolicies(n int) string {
	var b strings.Builder
	b.WriteString("policies:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - name: p%d\n    match: \"GET /svc%d/items/{id...}\"\n    key: ip\n    limits: [\"1000000000/s\"]\n", i, i)
	}
	return b.String()
}

// BenchmarkMatchCost decides a request against 1, 20 and 100 policies,
// with a short path and with an 8 KB one (which the server's default
// MaxHeaderBytes admits): each policy's pattern must not make the
// request's path be cleaned and split again.
func BenchmarkMatchCost(b *testing.B) {
	for _, n := range []int{1, 20, 100} {
		set, err := Load("bench.yaml", []byte(costPolicies(n)))
		if err != nil {
			b.Fatal(err)
		}
		e := NewEnforcer(set, memory.New(memory.Options{}), Options{})
		for _, path := range []struct{ name, target string }{
			{"short", "/svc0/items/1"},
			{"8KB", "/svc0/items/1" + strings.Repeat("/seg", 2048)},
		} {
			b.Run(fmt.Sprintf("policies=%d/path=%s", n, path.name), func(b *testing.B) {
				r := httptest.NewRequest("GET", path.target, http.NoBody)
				b.ReportAllocs()
				for b.Loop() {
					out := e.Enforce(context.Background(), &Request{HTTP: r, Header: r.Header})
					if out.Verdict != Allow {
						b.Fatalf("verdict %v, want allow", out.Verdict)
					}
					out.Done()
				}
			})
		}
	}
}

// Deciding a request against policies that do not match it costs no
// allocation per policy, whatever the path's length: the path is cleaned
// and split once per request, not once per policy. (ServeMux, asked per
// policy, allocated for each one a request missed.)
func TestMatchAllocsDoNotGrowWithPolicies(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops what is put back")
	}
	allocs := func(n int, target string) float64 {
		set, err := Load("test.yaml", []byte(costPolicies(n)))
		if err != nil {
			t.Fatal(err)
		}
		e := NewEnforcer(set, memory.New(memory.Options{}), Options{})
		r := httptest.NewRequest("GET", target, http.NoBody)
		return testing.AllocsPerRun(50, func() {
			out := e.Enforce(t.Context(), &Request{HTTP: r, Header: r.Header})
			out.Done()
		})
	}
	for _, target := range []string{"/svc0/items/1", "/svc0/items/1" + strings.Repeat("/seg", 2048)} {
		one, many := allocs(1, target), allocs(100, target)
		if many > one {
			t.Errorf("path of %d bytes: %v allocations against 100 policies, %v against 1: want no more", len(target), many, one)
		}
	}
}

// A policy's patterns match, through its routing tree and the request's
// path split once, exactly the requests its ServeMux routes to it: over
// patterns with hosts, wildcards, subtrees, {$} and escapes, under each
// paths option, and paths that are unclean, escaped, or one slash short
// of a subtree (which ServeMux redirects).
func TestRouteMatchesServeMux(t *testing.T) {
	patterns := []string{
		"/", "/login", "/login/", "/api/", "/api/{$}", "/{$}", "/LOGIN", "/A/b/",
		"/users/{id}", "/users/{id}/", "/users/{id}/posts", "/users/{id}/{rest...}",
		"/files/{path...}", "/{x}", "/{x}/", "/{x}/b", "/a/{x}/b", "/a/b", "/a/", "/a/{$}",
		"/a%2Fb", "/a%2Fb/c", "/%41/b", "/x/{seg}/login", "/a/b/c/", "/a;p/b", "/%7Bid%7D",
		"example.com/", "example.com/login", "example.com/a/{x}", "example.com/{$}", "Other.org./a/",
		"[::1]/a", "::1/a/", "/caf%C3%A9", "/a b", "/a%20b/",
	}
	vocab := []string{"a", "b", "c", "A", "api", "login", "LOGIN", "users", "7", "posts", "x", "files",
		"", ".", "..", "%2e%2e", "%2E", "%2F", "a%2Fb", "%41", "%zz", "a;p=1", "..;", "%3B", "%7Bid%7D",
		"caf%C3%A9", "caf%c3%a9", "%20", "a%20b", "b%2f"}
	hosts := []string{"example.com", "EXAMPLE.com.", "example.com:8080", "other.org", "[::1]:80", "[::1]", "::1", ""}
	rnd := rand.New(rand.NewPCG(1, 2))
	var targets []string
	for range 3000 {
		var b strings.Builder
		for range rnd.IntN(5) {
			b.WriteString("/" + vocab[rnd.IntN(len(vocab))])
		}
		if b.Len() == 0 || rnd.IntN(3) == 0 {
			b.WriteString("/")
		}
		targets = append(targets, b.String())
	}
	for _, opts := range []string{"", "{ignore_case: true}", "{ignore_trailing_slash: true}",
		"{ignore_path_parameters: true}", "{ignore_case: true, ignore_trailing_slash: true, ignore_path_parameters: true}"} {
		var sets []*Set
		for _, pat := range patterns {
			file := fmt.Sprintf("policies:\n  - name: p\n    match: %q\n    limits: [\"1/s\"]\n", pat)
			if opts != "" {
				file = "paths: " + opts + "\n" + file
			}
			if set, err := Load("test.yaml", []byte(file)); err == nil {
				sets = append(sets, set)
			}
		}
		if len(sets) < 30 {
			t.Fatalf("paths %s: %d of %d patterns loaded, want 30 or more", opts, len(sets), len(patterns))
		}
		var rt route
		matched, missed := 0, 0
		for i, target := range targets {
			u, err := url.ParseRequestURI(target)
			if err != nil {
				continue
			}
			method := "GET"
			if i%50 == 0 {
				method = http.MethodConnect
			}
			hr := &http.Request{Method: method, URL: u, Host: hosts[i%len(hosts)], Header: http.Header{}}
			for _, set := range sets {
				m := &set.policies[0].match
				if !m.marker.tree {
					t.Fatalf("pattern %q: no routing tree", m.pattern)
				}
				r := &Request{HTTP: hr, Header: hr.Header}
				r.routed = routed(hr, set.paths.Options)
				rt.reset(r.routed)
				h, _ := m.mux.Handler(r.routed)
				want := h == http.Handler(m.marker)
				if got := m.matches(r, &rt); got != want {
					t.Errorf("paths %s, pattern %q, %s %s (host %q), routed as %q: matches %v, ServeMux %v",
						opts, m.pattern, method, target, hr.Host, r.routed.URL.EscapedPath(), got, want)
				}
				if want {
					matched++
				} else {
					missed++
				}
			}
		}
		// Enough of both for the comparison to mean something.
		if matched < 500 || missed < 500 {
			t.Errorf("paths %s: %d requests matched, %d missed: want 500 or more of each", opts, matched, missed)
		}
	}

	// The tree follows ServeMux in what one policy's patterns never
	// meet: several patterns, where a literal segment beats a wildcard
	// and a host beats none, and a subtree's inexact match that a
	// pattern of path/ redirects; and requests as they come, unrouted.
	redirected := 0
	for range 300 {
		var pats []string
		for range 2 + rnd.IntN(3) {
			pats = append(pats, patterns[rnd.IntN(len(patterns))])
		}
		mux, mk, err := newMux(pats...)
		if err != nil {
			continue // conflicting patterns
		}
		if !mk.tree {
			t.Fatalf("patterns %q: no routing tree", pats)
		}
		m := &matcher{mux: mux, marker: mk}
		var rt route
		for i := range 300 {
			target := targets[rnd.IntN(len(targets))]
			u, err := url.ParseRequestURI(target)
			if err != nil {
				continue
			}
			method := "GET"
			if i%50 == 0 {
				method = http.MethodConnect
			}
			hr := &http.Request{Method: method, URL: u, Host: hosts[rnd.IntN(len(hosts))], Header: http.Header{}}
			rt.reset(hr)
			h, pat := mux.Handler(hr)
			want := h == http.Handler(mk)
			if got := m.matches(&Request{HTTP: hr, Header: hr.Header}, &rt); got != want {
				t.Errorf("patterns %q, %s %s (host %q): matches %v, ServeMux %v", pats, method, target, hr.Host, got, want)
			}
			if !want && pat != "" && rt.clean {
				redirected++
			}
		}
	}
	if redirected < 50 {
		t.Errorf("%d requests redirected to path/, want 50 or more", redirected)
	}
}

// A route keeps no room for a long path once the request is done: a
// pooled route would otherwise hold, from one request to the next, an
// array as long as the longest path any client sent.
func TestRouteKeepsNoLongArray(t *testing.T) {
	var rt route
	r := httptest.NewRequest("GET", "/a"+strings.Repeat("/a", 5000), http.NoBody)
	rt.reset(r)
	if got := rt.get(); len(got.segs) != 5001 {
		t.Fatalf("%d segments, want 5001", len(got.segs))
	}
	rt.reset(nil)
	if cap(rt.buf) > 1000 || rt.r != nil || rt.next != nil {
		t.Errorf("after the request: room for %d segments, request %v, next %v; want far fewer than the path's, and none", cap(rt.buf), rt.r, rt.next)
	}
}
